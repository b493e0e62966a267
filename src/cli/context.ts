import pg from 'pg';
import { StoreIsStandbyError } from '../core/errors.js';
import { refuseStandby, unconfiguredConnection } from '../store/postgres/admin.js';
import { PgStore } from '../store/postgres/index.js';
import type { ClusterSettings } from '../worker/cluster.js';
import type { Context, Database, GlobalOptions } from './command.js';
import type { CliEnvironment } from './environment.js';
import { type Fail, type Io, printer } from './output.js';
import { UsageError } from './usage.js';

/** A command's context, and the pool it opened (if any) for the caller to read errors by and end. */
export interface Session {
  ctx: Context;
  /** The pool `ctx.database()` opened; undefined while no command asked for the store. */
  pool(): pg.Pool | undefined;
  close(): Promise<void>;
}

/**
 * The context a command runs in. The store is connected on first use, so a command that never
 * reads it (`migrate --print-sql`) runs without a database, and a bad connection string is
 * refused when one is needed, not before.
 */
export function session(init: {
  options: GlobalOptions;
  env: CliEnvironment;
  /** Masked stdout and stderr. */
  io: Io;
  /** Unmasked stdout, for SQL this CLI generated. */
  verbatim: (line: string) => void;
  fail: Fail;
  confirm: ((question: string) => Promise<boolean>) | undefined;
  schema: string;
}): Session {
  const { options, env, io, schema } = init;
  let database: Database | undefined;
  const open = (): Database => {
    const config = options.connection ? { connectionString: options.connection } : env.database;
    if (config.connectionString !== undefined && !isPostgresUrl(config.connectionString))
      throw new UsageError(
        `${options.connection ? '--connection' : 'DATABASE_URL'} is not a Postgres URL: write it as postgres://USER@HOST:PORT/DATABASE`,
      );
    const missing = unconfiguredConnection(config, schema);
    if (missing) throw missing;
    const pool = new PrimaryPool({ ...config, max: 2, connectionTimeoutMillis: 5_000 });
    pool.on('error', () => {});
    return { pool, store: new PgStore({ pool, schema }) };
  };
  const temporal = (): ClusterSettings => {
    try {
      return env.temporal({
        address: options.address,
        namespace: options.namespace,
        profile: options.profile,
      });
    } catch (error) {
      // An unknown profile, an unreadable config file: configuration, not an outage.
      throw new UsageError(
        `the Temporal client configuration (--profile, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE): ${(error as Error).message}`,
      );
    }
  };
  const ctx: Context = {
    options,
    env,
    err: io.err,
    verbatim: init.verbatim,
    print: printer(options.output, io.out),
    fail: init.fail,
    confirm: init.confirm,
    schema,
    database: () => {
      database ??= open();
      return database;
    },
    temporal,
  };
  return {
    ctx,
    pool: () => database?.pool,
    close: async () => {
      await database?.pool.end();
    },
  };
}

/**
 * What pg can connect with: a postgres:// or postgresql:// URL, or a socket path. Anything else pg
 * reads as a host name ("not-a-url" became a DNS lookup of "base") and the CLI called it an outage.
 */
function isPostgresUrl(value: string): boolean {
  if (value.startsWith('/')) return true;
  try {
    return ['postgres:', 'postgresql:', 'socket:'].includes(new URL(value).protocol);
  } catch {
    return false;
  }
}

/**
 * The CLI's pool: before its first connection is handed out, one connection asks
 * `pg_is_in_recovery()`, and on a standby every connect fails with StoreIsStandbyError naming the
 * server. Every command reads through it, and a standby answers reads: "no keys", "up to date"
 * about a copy. Done here rather than in pg-pool's `onConnect`, which the pg versions this package
 * accepts do not all have. A check that fails for another reason (the server unreachable) is
 * tried again by the next connect, and that failure is the command's.
 */
class PrimaryPool extends pg.Pool {
  #checked: Promise<void> | undefined;

  override connect(): Promise<pg.PoolClient>;
  override connect(
    callback: (
      err: Error | undefined,
      client: pg.PoolClient | undefined,
      done: (release?: unknown) => void,
    ) => void,
  ): void;
  override connect(
    callback?: (
      err: Error | undefined,
      client: pg.PoolClient | undefined,
      done: (release?: unknown) => void,
    ) => void,
  ): Promise<pg.PoolClient> | undefined {
    const checked = this.#primary();
    if (!callback) return checked.then(() => super.connect());
    // pg-pool calls back in the tick it hands the client over, where its caller attaches listeners.
    checked.then(
      () => super.connect(callback),
      (error: Error) => callback(error, undefined, () => {}),
    );
    return undefined;
  }

  #primary(): Promise<void> {
    this.#checked ??= (async () => {
      const client = await super.connect();
      try {
        await refuseStandby(client, this);
      } finally {
        client.release();
      }
    })().catch((error: unknown) => {
      if (!(error instanceof StoreIsStandbyError)) this.#checked = undefined;
      throw error;
    });
    return this.#checked;
  }
}
