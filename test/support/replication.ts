/**
 * A primary and one streaming standby of their own, for tests of what a failover does to the
 * store: started from the Postgres 15 binaries on this machine (initdb into a temporary directory,
 * `pg_basebackup -R`), each on a port the kernel hands out, and removed by `stop()`. Nothing is
 * installed; the shared Postgres on 5432 is never touched. As root (CI) the servers run as the
 * `postgres` OS user, which owns the temporary directory.
 *
 *   const pair = await startReplicated({ synchronous: true });
 *   try {
 *     // ... traffic on pair.primary.url ...
 *     await pair.killPrimary();
 *     await pair.promote();
 *     // ... traffic on pair.standby.url ...
 *   } finally {
 *     await pair.stop();
 *   }
 */
import { execFile, spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { chown, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from '../faults/proxy.js';

const run = promisify(execFile);

/** Where the Postgres 15 binaries are (Debian's postgresql-15 package). */
export const PG_BIN = '/usr/lib/postgresql/15/bin';
const AS_ROOT = process.getuid?.() === 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One server of the pair. */
export interface PgNode {
  readonly name: 'primary' | 'standby';
  readonly dataDir: string;
  /** Its current port (a restart after a lost bind race moves it). */
  readonly port: number;
  /** `postgres://postgres@127.0.0.1:<port>/postgres`, trust authentication. */
  readonly url: string;
  /** The last lines of its server log, for a failure message. */
  logTail(lines?: number): Promise<string>;
}

export interface ReplicatedPostgres {
  readonly primary: PgNode;
  readonly standby: PgNode;
  /** Whether the primary's commits wait for the standby (synchronous_standby_names). */
  readonly synchronous: boolean;
  /**
   * Stops the standby's WAL receiver (primary_conninfo emptied and reloaded): from here on the
   * standby falls behind, as a lagging asynchronous standby does. With `synchronous`, commits on
   * the primary then wait until `attachStandby()`.
   */
  detachStandby(): Promise<void>;
  /** Streams again from the primary. */
  attachStandby(): Promise<void>;
  /**
   * Pauses WAL replay on the standby (it keeps receiving): reads on it lag, but a promotion
   * replays what it received, so this alone loses nothing.
   */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Waits until the standby has replayed everything the primary has written so far. */
  caughtUp(timeoutMs?: number): Promise<void>;
  /** SIGKILL to the primary's postmaster and every backend of it at once: a machine gone. */
  killPrimary(): Promise<void>;
  /** Promotes the standby and waits until it accepts writes. */
  promote(): Promise<void>;
  /** Stops both servers (immediate) and removes their directory. Safe to call twice. */
  stop(): Promise<void>;
}

export interface ReplicatedOptions {
  /** Commits wait for the standby (synchronous_commit = on, synchronous_standby_names). */
  synchronous: boolean;
  /** Postgres max_connections of each server (default 40: keep pools small). */
  maxConnections?: number;
}

export async function startReplicated(options: ReplicatedOptions): Promise<ReplicatedPostgres> {
  const root = await mkdtemp(join(tmpdir(), 'sideeffect-replication-'));
  if (AS_ROOT) await chown(root, ...(await postgresIds()));
  const nodes: Node[] = [];
  let stopped: Promise<void> | undefined;
  const atExit = () => {
    for (const node of nodes) node.stopNow();
    rmSync(root, { recursive: true, force: true });
  };
  // A test process that exits without its `finally` (a timeout, process.exit) leaves no server.
  process.once('exit', atExit);
  const stop = () => {
    stopped ??= (async () => {
      process.off('exit', atExit);
      for (const node of nodes) await node.stop();
      await rm(root, { recursive: true, force: true });
    })();
    return stopped;
  };
  try {
    const primary = new Node('primary', join(root, 'primary'));
    nodes.push(primary);
    await pgBin('initdb', [
      '-D',
      primary.dataDir,
      '-U',
      'postgres',
      '--auth=trust',
      '--no-sync',
      '--no-instructions',
    ]);
    await primary.appendConf({
      listen_addresses: "'127.0.0.1'",
      unix_socket_directories: `'${root}'`,
      max_connections: String(options.maxConnections ?? 40),
      shared_buffers: "'16MB'",
      wal_level: 'replica',
      max_wal_senders: '4',
      hot_standby: 'on',
      wal_keep_size: "'128MB'",
      // A kill -9 keeps the OS page cache: durability here is about replication, not disks.
      fsync: 'off',
      full_page_writes: 'off',
    });
    await primary.start();

    const standby = new Node('standby', join(root, 'standby'));
    nodes.push(standby);
    await pgBin('pg_basebackup', [
      '-h',
      '127.0.0.1',
      '-p',
      String(primary.port),
      '-U',
      'postgres',
      '-D',
      standby.dataDir,
      '-R',
      '-X',
      'stream',
      '-c',
      'fast',
      '--no-sync',
    ]);
    const conninfo = () =>
      `'host=127.0.0.1 port=${primary.port} user=postgres application_name=standby'`;
    await standby.appendConf({ primary_conninfo: conninfo() });
    await standby.start();
    if (options.synchronous) {
      // On the primary only (after the base backup): a promoted standby must not wait for one.
      await sql(primary.url, `alter system set synchronous_standby_names = 'standby'`);
      await sql(primary.url, 'alter system set synchronous_commit = on');
      await sql(primary.url, 'select pg_reload_conf()');
    }
    await waitFor(
      async () =>
        (
          await sql(
            primary.url,
            `select sync_state from pg_stat_replication where application_name = 'standby'
               and state = 'streaming'`,
          )
        ).rows[0]?.sync_state === (options.synchronous ? 'sync' : 'async'),
      30_000,
      'the standby streaming',
      standby,
    );

    const setConninfo = async (value: string) => {
      await sql(standby.url, `alter system set primary_conninfo = ${value}`);
      await sql(standby.url, 'select pg_reload_conf()');
    };
    return {
      primary,
      standby,
      synchronous: options.synchronous,
      detachStandby: async () => {
        await setConninfo("''");
        await waitFor(
          async () =>
            (await sql(standby.url, 'select count(*)::int as n from pg_stat_wal_receiver')).rows[0]
              ?.n === 0,
          15_000,
          'the WAL receiver stopped',
          standby,
        );
      },
      attachStandby: () => setConninfo(conninfo()),
      pauseReplay: async () => {
        await sql(standby.url, 'select pg_wal_replay_pause()');
      },
      resumeReplay: async () => {
        await sql(standby.url, 'select pg_wal_replay_resume()');
      },
      caughtUp: async (timeoutMs = 30_000) => {
        const { rows } = await sql(primary.url, 'select pg_current_wal_lsn()::text as lsn');
        await waitFor(
          async () =>
            (
              await sql(standby.url, 'select pg_last_wal_replay_lsn() >= $1::pg_lsn as ok', [
                rows[0]?.lsn,
              ])
            ).rows[0]?.ok === true,
          timeoutMs,
          'the standby caught up',
          standby,
        );
      },
      killPrimary: () => primary.kill9(),
      promote: async () => {
        await pgBin('pg_ctl', ['-D', standby.dataDir, '-w', '-t', '60', 'promote']);
        await waitFor(
          async () =>
            (await sql(standby.url, 'select pg_is_in_recovery() as r')).rows[0]?.r === false,
          30_000,
          'the promoted standby accepting writes',
          standby,
        );
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

class Node implements PgNode {
  port = 0;

  constructor(
    readonly name: 'primary' | 'standby',
    readonly dataDir: string,
  ) {}

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  get #log(): string {
    return `${this.dataDir}.log`;
  }

  async logTail(lines = 30): Promise<string> {
    const text = await readFile(this.#log, 'utf8').catch(() => '(no log)');
    return text.split('\n').slice(-lines).join('\n');
  }

  /** Appends to postgresql.auto.conf, read last: these win over initdb's and `-R`'s lines. */
  async appendConf(settings: Record<string, string>): Promise<void> {
    const lines = Object.entries(settings)
      .map(([name, value]) => `${name} = ${value}`)
      .join('\n');
    // Written by the server's user: the file is in its data directory.
    await pgShell(`printf '%s\\n' "$1" >> "$2"`, [
      lines,
      join(this.dataDir, 'postgresql.auto.conf'),
    ]);
  }

  /**
   * Starts on a free port; a port taken between freePort() and the bind (another process won the
   * race) is retried on another one.
   */
  async start(): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      this.port = await freePort();
      try {
        await pgBin('pg_ctl', [
          '-D',
          this.dataDir,
          '-l',
          this.#log,
          '-o',
          `-p ${this.port}`,
          '-w',
          '-t',
          '60',
          'start',
        ]);
        return;
      } catch (error) {
        const tail = await this.logTail();
        if (attempt < 5 && /Address already in use|could not create any TCP\/IP/.test(tail)) {
          continue;
        }
        throw new Error(`Postgres ${this.name} did not start: ${String(error)}\n${tail}`);
      }
    }
  }

  async #pids(): Promise<number[]> {
    const text = await readFile(join(this.dataDir, 'postmaster.pid'), 'utf8').catch(() => '');
    const postmaster = Number.parseInt(text.split('\n')[0] ?? '', 10);
    if (!Number.isInteger(postmaster) || postmaster <= 0) return [];
    // A pid file left by a killed server may name a pid reused since by another process.
    const cmdline = await readFile(`/proc/${postmaster}/cmdline`, 'utf8').catch(() => '');
    if (!cmdline.includes(this.dataDir)) return [];
    const { stdout } = await run('ps', ['-o', 'pid=', '--ppid', String(postmaster)]).catch(() => ({
      stdout: '',
    }));
    return [postmaster, ...stdout.split(/\s+/).filter(Boolean).map(Number)];
  }

  /**
   * Every process stopped first, then killed: a backend that outlived its postmaster for a moment
   * could still answer its client ("unexpected postmaster exit"), which a dead machine never does.
   */
  async kill9(): Promise<void> {
    const pids = await this.#pids();
    if (pids.length === 0) throw new Error(`Postgres ${this.name} is not running`);
    for (const signal of ['SIGSTOP', 'SIGKILL'] as const) signalAll(pids, signal);
  }

  /** stop(), synchronously: for the process's `exit` event. */
  stopNow(): void {
    const [file, argv] = pgCommand('pg_ctl', ['-D', this.dataDir, '-m', 'immediate', '-w', 'stop']);
    spawnSync(file, argv, { stdio: 'ignore', timeout: 10_000 });
  }

  async stop(): Promise<void> {
    await pgBin('pg_ctl', ['-D', this.dataDir, '-m', 'immediate', '-w', 'stop']).catch(() => {});
    // A killed postmaster leaves no pg_ctl to stop it; its backends could linger.
    signalAll(await this.#pids(), 'SIGKILL');
  }
}

function signalAll(pids: number[], signal: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch {
      // Gone already.
    }
  }
}

async function postgresIds(): Promise<[number, number]> {
  const { stdout: uid } = await run('id', ['-u', 'postgres']);
  const { stdout: gid } = await run('id', ['-g', 'postgres']);
  return [Number(uid.trim()), Number(gid.trim())];
}

/** A Postgres binary, as the `postgres` OS user when we are root (initdb and pg_ctl refuse root). */
async function pgBin(name: string, args: string[]): Promise<void> {
  const [file, argv] = pgCommand(name, args);
  await run(file, argv, { timeout: 120_000 });
}

function pgCommand(name: string, args: string[]): [string, string[]] {
  const bin = join(PG_BIN, name);
  return AS_ROOT ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
}

async function pgShell(script: string, args: string[]): Promise<void> {
  const [file, argv] = AS_ROOT
    ? ['runuser', ['-u', 'postgres', '--', 'sh', '-c', script, 'sh', ...args]]
    : ['sh', ['-c', script, 'sh', ...args]];
  await run(file, argv);
}

async function sql(url: string, text: string, values?: unknown[]): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    return await client.query(text, values);
  } finally {
    await client.end().catch(() => {});
  }
}

async function waitFor(
  check: () => Promise<boolean>,
  timeoutMs: number,
  what: string,
  node: Node,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      if (await check()) return;
    } catch (error) {
      last = error;
    }
    await sleep(100);
  }
  throw new Error(
    `timed out waiting for ${what}${last ? ` (${String(last)})` : ''}\n${await node.logTail()}`,
  );
}
