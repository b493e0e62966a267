import pg from 'pg';
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
    const pool = new pg.Pool({ ...config, max: 2, connectionTimeoutMillis: 5_000 });
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
