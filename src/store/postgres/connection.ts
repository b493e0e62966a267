import type pg from 'pg';

/**
 * How the worker, the CLI and the demo find the database, in one place: `DATABASE_URL` when it
 * is set, else pg's own `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE` (and pg's
 * defaults for what they leave out; a URL's missing parts come from them too). `new pg.Pool()`
 * alone ignores `DATABASE_URL`, which is how a CLI and a worker end up reading different
 * databases; pass this to `new pg.Pool(...)` instead.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool(connectionConfig());
 * ```
 */
export function connectionConfig(
  options: {
    /** Wins over the environment (the CLI's `--connection`). */
    connectionString?: string | undefined;
    /** @default process.env */
    env?: Record<string, string | undefined>;
  } = {},
): pg.PoolConfig {
  const env = options.env ?? process.env;
  const connectionString = options.connectionString || env.DATABASE_URL;
  if (connectionString) return { connectionString };
  const config: pg.PoolConfig = {};
  if (env.PGHOST) config.host = env.PGHOST;
  if (env.PGPORT) config.port = Number(env.PGPORT);
  if (env.PGUSER) config.user = env.PGUSER;
  if (env.PGPASSWORD) config.password = env.PGPASSWORD;
  if (env.PGDATABASE) config.database = env.PGDATABASE;
  return config;
}
