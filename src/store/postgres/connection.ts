import pg from 'pg';
import { StoreIsStandbyError, StoreMisconfiguredError } from '../../core/errors.js';

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
  // pg's own default, read from `env` so the environment given is the one that counts.
  const user = env.PGUSER || (process.platform === 'win32' ? env.USERNAME : env.USER);
  if (user) config.user = user;
  if (env.PGPASSWORD) config.password = env.PGPASSWORD;
  if (env.PGDATABASE) config.database = env.PGDATABASE;
  return config;
}

/**
 * StoreMisconfiguredError when `config` names no user (no URL, no `PGUSER`, no `USER` for pg to
 * default to): Postgres would be asked for database "undefined" as user "undefined", and refuse
 * with a message that names neither what is missing nor where to set it.
 */
export function unconfiguredConnection(
  config: pg.PoolConfig,
  schema?: string,
): StoreMisconfiguredError | undefined {
  if (config.connectionString || config.user) return undefined;
  return new StoreMisconfiguredError(
    schema,
    'no database to connect to: DATABASE_URL is not set, nor PGUSER, and there is no USER for Postgres to take as the user name and database',
    undefined,
    'set DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/DATABASE (or PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE) where the worker and the CLI run; on the CLI, --connection URL does the same',
  );
}

/**
 * What Postgres answers when it refuses who connects or where to: a configuration mistake, which
 * no retry fixes, never an outage. Each with what to check.
 */
const REFUSALS: Record<string, string> = {
  '28P01':
    'check the password (DATABASE_URL, PGPASSWORD or --connection; a secret store may hold an old one)',
  '28000':
    'check the user name, and that pg_hba.conf admits it from this host (DATABASE_URL, PGUSER or --connection)',
  '3D000': 'check the database name (DATABASE_URL, PGDATABASE or --connection)',
  '42501': privilegeAdvice('runtime'),
};

/**
 * What to grant for a refused privilege: the grants of the role kind the refused work needs (a
 * worker: runtime; a person's command: operator; a read: readonly). Advising `--kind runtime`
 * for an operator's `resolve` sent people to grant a person a worker's writes.
 */
function privilegeAdvice(kind: 'runtime' | 'operator' | 'readonly'): string {
  return `grant the role what it needs: \`sideeffect migrate --print-grants ROLE --kind ${kind}\` prints it (docs/database-roles.md), or connect as the role you granted`;
}

/** The pg error along the `cause` chain whose SQLSTATE is a refusal, if there is one. */
function refusalOf(error: unknown): { code: string; message: string } | undefined {
  let at = error;
  for (let depth = 0; at && typeof at === 'object' && depth < 4; depth++) {
    const { code, message } = at as { code?: unknown; message?: unknown };
    if (typeof code === 'string' && Object.hasOwn(REFUSALS, code))
      return { code, message: String(message) };
    at = (at as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * Where `pool` connects, as an operator reads it: host, port, database and user (never the
 * password), resolved as pg resolves them (URL, then `PG*` variables, then pg's defaults).
 */
export function connectionTarget(pool: pg.Pool): string {
  const { host, port, database, user } = new pg.Client(pool.options);
  return `Postgres at ${host}:${port}, database "${database}", user "${user}"`;
}

/**
 * StoreIsStandbyError, naming `pool`'s server, when `client` (one of its connections) reached a
 * standby: a read-only copy answers reads like the primary ("no keys", "up to date") and refuses
 * every write later, with a message that does not say why.
 */
export async function refuseStandby(client: pg.ClientBase, pool: pg.Pool): Promise<void> {
  const { rows } = await client.query<{ standby: boolean }>(
    'select pg_catalog.pg_is_in_recovery() as standby',
  );
  if (rows[0]?.standby) throw new StoreIsStandbyError(connectionTarget(pool));
}

/**
 * StoreMisconfiguredError when `error` is Postgres refusing the user, the password, the database
 * or a privilege (SQLSTATE 28P01, 28000, 3D000, 42501), naming where `pool` connects; else
 * undefined (an outage, or another failure). Used where a refusal must stop the caller: the
 * worker's start-up check and the CLI. An effect that meets one while running still retries, so a
 * password rotated mid-apply never turns into a failed payment.
 */
export function connectionRefusal(
  pool: pg.Pool,
  error: unknown,
  schema?: string,
  /** The role kind the refused work needs, for a privilege refused (42501). @default 'runtime' */
  kind: 'runtime' | 'operator' | 'readonly' = 'runtime',
): StoreMisconfiguredError | undefined {
  const refusal = refusalOf(error);
  if (!refusal) return undefined;
  const missing = unconfiguredConnection({ user: new pg.Client(pool.options).user }, schema);
  if (missing) return Object.assign(missing, { cause: error });
  return new StoreMisconfiguredError(
    schema,
    `${connectionTarget(pool)}: refused, ${refusal.message} (SQLSTATE ${refusal.code})`,
    error,
    refusal.code === '42501' ? privilegeAdvice(kind) : REFUSALS[refusal.code],
  );
}
