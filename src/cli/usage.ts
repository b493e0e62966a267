/** Bad command-line input: printed with the command's help, exit code 2, nothing touched. */
export class UsageError extends Error {
  readonly code = 'USAGE';
  constructor(
    message: string,
    readonly help: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

export const EXIT = { ok: 0, refused: 1, usage: 2, unavailable: 3 } as const;

export const HELP: Record<string, string> = {
  main: `sideeffect — inspect and resolve at-most-once side effects

Usage: sideeffect [options] <command> [options]
       sideeffect help <command>    (or sideeffect <command> --help): that command's usage

Commands:
  migrate [--status|--dry-run|--print-sql]
                               create or upgrade the tables (safe to run from many workers);
                               --status lists applied and pending migrations, --dry-run what
                               would be applied, --print-sql the SQL for your own migration tool
  list [--state S] [--limit N] keys, newest change first (S: free|held|applying|done|uncertain)
  show <key>                   state, fence, result, reason and the event history of a key
  resolve <key> --fence N --applied --result JSON|--not-applied --reason TEXT [--by NAME]
                               decide the uncertain attempt N of a key (show prints N; through
                               its ReconcileWorkflow if one runs)
  resolve --resource R --any-attempt --applied|--not-applied --reason TEXT [--older-than D] [--newer-than D] [--dry-run]
  resolve --from-file verdicts.jsonl [--any-attempt] [--by NAME] [--dry-run]
                               decide many uncertain keys: one verdict for a resource, or one per line
  stats                        uncertain backlog, who decides and how fast, from the store
  purge --older-than 30d [--yes] [--force]
                               delete done keys past retention (never uncertain keys or fences)
  codec-server --data-converter PATH --token-file PATH [--port N] [--cors-origin URL]
                               your payload codecs as a codec server, so the Temporal UI shows
                               encrypted payloads and encodes the verdicts you send from it

Options everywhere (before or after the command):
  -o, --output text|json|jsonl  text for people (default); json one document; jsonl one object a
                                line. --json is -o json. Times are ISO-8601; errors in JSON are
                                {"error": {"code", "message"}}
  --connection URL   Postgres; default DATABASE_URL, else the PG* variables (PGHOST, PGPORT,
                     PGUSER, PGPASSWORD, PGDATABASE, with pg's defaults), as a worker reads them
  --schema NAME      the store's schema; default SIDEEFFECT_SCHEMA, else sideeffect
  --address, -n/--namespace, --profile   Temporal, as the temporal CLI takes them; default
                     TEMPORAL_ADDRESS (else 127.0.0.1:7233), TEMPORAL_NAMESPACE (else default),
                     TEMPORAL_PROFILE, with TEMPORAL_API_KEY, TEMPORAL_TLS*, TEMPORAL_CONFIG_FILE
  -h, --help; sideeffect --version prints the version
SIDEEFFECT_DATA_CONVERTER (or --data-converter PATH on resolve and codec-server): a module
  exporting your dataConverter (e.g. an encryption codec), used for everything sent to and read
  from Temporal
Durations (purge, resolve --older-than): 30d, 12h, 1h30m, 45s, "2 days", "1 hour"

Exit codes: 0 done, 1 refused (e.g. already resolved, unknown key, a verdict for an earlier
episode), 2 bad arguments, 3 store or Temporal unreachable (a resolve recorded in the store
while Temporal did not answer exits 3 too: the waiting workflow was not told)`,
  migrate: `Usage: sideeffect migrate [--status | --dry-run | --print-sql | --print-grants ROLE --kind KIND] [-o text|json|jsonl]

Creates or upgrades the sideeffect tables in the schema (--schema, SIDEEFFECT_SCHEMA).
Idempotent; several workers may run it at once.
  --status      list the applied migrations (with when) and the pending ones; changes nothing
  --dry-run     print what migrate would apply; changes nothing
  --print-sql   print, without connecting, one SQL script that creates the schema from
                scratch and records its migrations, for a team whose own tool owns the
                database (a later \`sideeffect migrate\` then finds nothing to do)
  --print-grants ROLE --kind runtime|operator|readonly
                print, without connecting, the GRANT statements that give an existing role
                what its kind needs (docs/database-roles.md); run them as the schema's owner`,
  list: `Usage: sideeffect list [--state free|held|applying|done|uncertain] [--limit N] [-o json]

Lists keys, newest change first (default limit 50).`,
  show: `Usage: sideeffect show <key> [-o json]

Shows a key's state, fence, result, reason and every transition with who made it and why.`,
  resolve: `Usage: sideeffect resolve <key> --fence N|--any-attempt --applied --result JSON|--not-applied --reason TEXT [--by NAME] [--wait D|--store-only] [-o json]

Decides an uncertain key after you checked the downstream.
  --applied       it took effect; --result (required) is the JSON the workflow will get,
                  null for an effect that returns nothing. A worker checks it against the
                  effect's declared result check and refuses a bad one before recording it
  --not-applied   it did not; the waiting workflow runs the effect again
  --wait D        how long the ReconcileWorkflow gets to answer (default 30s; 45s, 2m...). Past
                  it (its worker busy or gone), when Temporal does not answer, or when the
                  namespace has no reconcile/<key>, the verdict is HELD in the store as pending
                  (exit 3): a worker runs the effect's result check on it when the key's
                  ReconcileWorkflow next reads the store (the CLI sends it \`recheck\`; the
                  worker's sweeper prompts it about every minute once Temporal answers).
                  Accepted, it decides; refused, the key stays uncertain. sideeffect show <key>
                  lists held verdicts and why one was refused
  --store-only    decide in the store at once, checked by no worker: only for keys no Temporal
                  worker serves (a plain Runner). Also for the batch forms below
  --fence N       required: the attempt you checked, the key's fence while uncertain
                  (sideeffect show KEY prints it). If the key was since re-applied and became
                  uncertain again, your verdict is about an earlier attempt: refused (exit 1),
                  naming the attempt that is uncertain now
  --any-attempt   instead of --fence: decide whichever attempt is uncertain when the verdict is
                  sent, and print its fence. Only when what you checked holds for any attempt
If the key's ReconcileWorkflow (reconcile/<key>) is running, the verdict goes through it,
so the waiting workflow continues; otherwise it is held in the store for a worker's check.
The first resolution wins: if someone resolved the key first, you are told so (exit 1).
  --data-converter PATH   a module exporting \`dataConverter\` (or a default export): the data
                  converter your Client and Worker use, e.g. with an encryption codec
                  (default: SIDEEFFECT_DATA_CONVERTER; without one, encrypted payloads cannot be
                  read). Also for the batch forms below

Usage: sideeffect resolve --resource R --any-attempt --applied|--not-applied --reason TEXT
                          [--older-than D] [--newer-than D] [--by NAME] [--dry-run] [-o json]
       sideeffect resolve --from-file verdicts.jsonl [--any-attempt] [--by NAME] [--dry-run] [-o json]

Decides many keys after an outage, each through its ReconcileWorkflow when one runs.
  --resource R      every key uncertain on R now, each at its current attempt (--any-attempt is
                    required; the summary prints each key's fence); --older-than/--newer-than
                    (30d, 1h30m, 45s) keep those uncertain for longer/shorter than that. No
                    --result: every key would get the same one; per-key results go in --from-file
  --from-file F     one JSON object a line: {"key": "...", "applied": true, "result": {...},
                    "reason": "...", "by": "...", "fence": 7} (result and by optional; fence
                    required unless --any-attempt, which decides each fence-less key's current
                    attempt). Every line is checked before anything is sent (exit 2 on the first
                    bad line)
  --dry-run         read which keys are uncertain, send nothing
Prints decided / already decided / refused / failed. Exit 0 when every verdict was recorded,
1 when some key was already decided or refused, 3 when some could not be sent (run it again:
decided keys then report "already decided").`,
  stats: `Usage: sideeffect stats [-o json]

From the store: uncertain keys now and the oldest one's age, keys by state, uncertain episodes,
and for resolved ones who decided (probe:<effect>, cli:<user>, a person), which verdict and
how long it took from uncertain to verdict.`,
  'codec-server': `Usage: sideeffect codec-server --data-converter PATH --token-file PATH [--port N] [--host H]
                               [--cors-origin URL]... [-n NS] [--max-concurrent N] [--max-inflight-mb N] [-o json]

Serves the payload codecs of your data converter over Temporal's codec server protocol
(POST /encode and /decode, {"payloads": [...]}), so the Temporal web UI shows what an encryption
codec wrote (a ReconcileWorkflow's key and reason) and encodes a verdict you send from it as
your workers would. Runs until Ctrl-C (SIGINT) or SIGTERM.
  --data-converter PATH  a module exporting \`dataConverter\` (or a default export) with
                 payloadCodecs (default: SIDEEFFECT_DATA_CONVERTER)
  --token-file PATH  the token every request must carry, since the server decrypts for whoever
                 calls it (default: SIDEEFFECT_CODEC_TOKEN). 16+ characters of A-Z a-z 0-9 . _ ~ -;
                 make one with \`openssl rand -hex 32 > codec.token\`. A request carries it as
                 Authorization: Bearer <token> (temporal --codec-auth "Bearer <token>") or in the
                 path: the Temporal UI's codec endpoint is http://host:port/<token>. Else 401
  --insecure-no-auth  serve without a token: only with a loopback --host (every process on
                 this machine can then decrypt)
  --port N       default 8888; 0 picks a free port (the printed URL says which)
  --host H       the address to listen on, default 127.0.0.1. Past this machine, put TLS in
                 front (the token travels in every request)
  --cors-origin URL  the browser origin of the UI that may call it (repeatable); default
                 http://localhost:8233 and http://127.0.0.1:8233, the dev server's UI. Other
                 origins are refused (403); requests without Origin need the token like any other
  -n, --namespace NS  serve only requests whose X-Namespace is NS (one naming none is refused)
  --max-concurrent N  requests served at once, default 16; past it 503 (try again)
  --max-inflight-mb N  megabytes of request bodies held at once, default 32; past it 503, and
                 a body larger than that (or 16) is refused with 413
Point the UI at http://host:port/<token>: \`temporal server start-dev --ui-codec-endpoint URL\`,
a UI server's TEMPORAL_CODEC_ENDPOINT, or the UI's Codec Server setting (this browser only);
the temporal CLI takes --codec-endpoint URL --codec-auth "Bearer <token>". Refusals get a status
and {"error": {"code", "message"}}: 401 UNAUTHORIZED, 403 ORIGIN_NOT_ALLOWED or
NAMESPACE_NOT_SERVED, 413 TOO_LARGE, 503 BUSY, 400 INVALID_JSON, INVALID_REQUEST,
INVALID_PAYLOAD or CODEC_FAILED.`,
  purge: `Usage: sideeffect purge --older-than DURATION [--yes] [--force] [-o json]

Deletes done keys (and their events) last changed more than DURATION ago, e.g. 30d, 1h30m,
"2 days". Uncertain keys and resource fences are never deleted. A purged key is forgotten: a
caller that retries it later runs its effect again.

  --yes     do not ask for confirmation (required when stdin or stdout is not a terminal: cron, CI)
  --force   allow DURATION below the floor of 7 days, the youngest a done key is purged by default`,
};
