/**
 * Postgres for tests: a schema of its own per call, so files run in parallel without seeing each
 * other's tables. Each new schema costs catalog rows (and a migrate() on it 1-2 s): a file's
 * tests that need a migrated store share one through pgHarness (test/support/migrated-schemas.ts);
 * a test takes one of its own when it tests migrate() itself or changes the schema's catalog.
 *
 *   const db = await freshSchema('lease');
 *   afterAll(() => db.drop());
 *   await db.pool.query('create table t (id int)'); // lands in db.schema (it is the search_path)
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { maskConnectionString } from '../../src/core/mask.js';

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/test';

/** Schemas made by freshSchema start with this; names carry their creation time (base 36 ms). */
const SCHEMA_PREFIX = 't_';
const SCHEMA_NAME = /^t_[a-z0-9_]*_([0-9a-z]{8,9})_[0-9a-f]{6}$/;

export function databaseUrl(): string {
  return process.env.DATABASE_URL || DEFAULT_DATABASE_URL;
}

function unreachable(cause: unknown): Error {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new Error(
    `Postgres is not reachable at ${maskConnectionString(databaseUrl())} (${reason}). ` +
      'Start it (sudo pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start) ' +
      'or set DATABASE_URL=postgres://user:password@host:port/database to one that is.',
    { cause },
  );
}

/** Opens and closes one connection; throws a helpful error when Postgres does not answer. */
export async function assertPostgresReachable(): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl(), connectionTimeoutMillis: 5_000 });
  try {
    await client.connect();
    await client.query('select 1');
  } catch (error) {
    throw unreachable(error);
  } finally {
    await client.end().catch(() => {});
  }
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

export interface FreshSchema {
  /** Pool whose connections have `search_path` set to `schema` (unqualified names land there). */
  pool: pg.Pool;
  schema: string;
  /** The config `pool` was made from: for code under test that opens its own pool or client. */
  config: pg.PoolConfig;
  /** Ends `pool` and drops the schema with everything in it. Safe to call twice. */
  drop(): Promise<void>;
}

/**
 * Creates a uniquely named, empty schema (e.g. `t_lease_m1abcdef_0a1b2c`) and a pool using it, in
 * the test database or the one at `url`.
 */
export async function freshSchema(prefix: string, url = databaseUrl()): Promise<FreshSchema> {
  const tag = prefix
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '')
    .slice(0, 30);
  const schema = `${SCHEMA_PREFIX}${tag}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  const config: pg.PoolConfig = {
    connectionString: url,
    connectionTimeoutMillis: 10_000,
    options: `-c search_path=${schema}`,
  };

  const admin = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  try {
    await admin.connect();
  } catch (error) {
    await admin.end().catch(() => {});
    throw unreachable(error);
  }
  try {
    await admin.query(`create schema ${quoteIdent(schema)}`);
  } finally {
    await admin.end();
  }

  const pool = new pg.Pool(config);
  let dropped: Promise<void> | undefined;
  const drop = (): Promise<void> => {
    dropped ??= (async () => {
      await pool.end().catch(() => {});
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        await client.query(`drop schema if exists ${quoteIdent(schema)} cascade`);
      } finally {
        await client.end();
      }
    })();
    return dropped;
  };
  return { pool, schema, config, drop };
}

/**
 * The URL of a database of its own (created once, then kept) whose default isolation level is
 * `level`, as a database or role setting of a real deployment can make it: for tests that the
 * store does not depend on READ COMMITTED being the default.
 */
export async function databaseWithDefaultIsolation(
  level: 'serializable' | 'repeatable read',
  /** A database of its own for this purpose too (e.g. `hostile`: objects planted in its `public`). */
  purpose?: string,
): Promise<string> {
  const name = `sideeffect_test_${level.replace(' ', '_')}${purpose ? `_${purpose}` : ''}`;
  const admin = new pg.Client({ connectionString: databaseUrl(), connectionTimeoutMillis: 5_000 });
  await admin.connect();
  try {
    const { rowCount } = await admin.query('select from pg_database where datname = $1', [name]);
    if (rowCount === 0) {
      await admin.query(`create database ${quoteIdent(name)}`).catch((error: { code?: string }) => {
        if (error.code !== '42P04' && error.code !== '23505') throw error; // made meanwhile
      });
    }
    // Several files ask at once: only the first run (or a database whose setting was changed)
    // alters it, and two concurrent alters fail one of them with "tuple concurrently updated".
    for (let attempt = 1; ; attempt++) {
      const { rowCount: set } = await admin.query(
        `select from pg_db_role_setting s join pg_database d on d.oid = s.setdatabase
          where d.datname = $1 and s.setrole = 0 and $2 = any(s.setconfig)`,
        [name, `default_transaction_isolation=${level}`],
      );
      if (set !== 0) break;
      try {
        await admin.query(
          `alter database ${quoteIdent(name)} set default_transaction_isolation to '${level}'`,
        );
        break;
      } catch (error) {
        if (attempt >= 5 || !/tuple concurrently updated/.test(String(error))) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
      }
    }
  } finally {
    await admin.end();
  }
  const url = new URL(databaseUrl());
  url.pathname = `/${name}`;
  return url.toString();
}

/**
 * The URL of a database of its own (created once, then kept), for a test that changes what every
 * schema of a database sees (objects planted in its `public`): other test files running at the
 * same time in the shared test database must never see them.
 */
export async function databaseOfItsOwn(purpose: string): Promise<string> {
  const name = `sideeffect_test_${purpose}`;
  const admin = new pg.Client({ connectionString: databaseUrl(), connectionTimeoutMillis: 5_000 });
  await admin.connect();
  try {
    const { rowCount } = await admin.query('select from pg_database where datname = $1', [name]);
    if (rowCount === 0) {
      await admin.query(`create database ${quoteIdent(name)}`).catch((error: { code?: string }) => {
        if (error.code !== '42P04' && error.code !== '23505') throw error; // made meanwhile
      });
    }
  } finally {
    await admin.end();
  }
  const url = new URL(databaseUrl());
  url.pathname = `/${name}`;
  return url.toString();
}

/**
 * Drops schemas left by freshSchema in runs that crashed before drop(), once older than
 * `maxAgeMs` (old enough that no test still running can own them). Returns the dropped names.
 */
export async function dropStaleSchemas(maxAgeMs = 6 * 60 * 60 * 1000): Promise<string[]> {
  const client = new pg.Client({ connectionString: databaseUrl(), connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    const { rows } = await client.query<{ nspname: string }>(
      `select nspname from pg_namespace where nspname like 't\\_%'`,
    );
    const dropped: string[] = [];
    for (const { nspname } of rows) {
      const match = SCHEMA_NAME.exec(nspname);
      if (!match?.[1]) continue;
      const createdAt = Number.parseInt(match[1], 36);
      if (Date.now() - createdAt < maxAgeMs) continue;
      await client.query(`drop schema if exists ${quoteIdent(nspname)} cascade`);
      dropped.push(nspname);
    }
    return dropped;
  } finally {
    await client.end();
  }
}

/**
 * The system catalogs every schema made and dropped leaves dead rows in. With autovacuum off
 * (as on the shared test machine) nothing removes them, and each migrate() reads pg_proc and
 * pg_class by namespace: after some 550 schemas one such read took 30 times as long. Shared
 * catalogs (roles) are in the list too: the role tests make and drop roles.
 */
const CATALOGS = [
  'pg_class',
  'pg_attribute',
  'pg_proc',
  'pg_depend',
  'pg_type',
  'pg_constraint',
  'pg_index',
  'pg_attrdef',
  'pg_trigger',
  'pg_rewrite',
  'pg_namespace',
  'pg_sequence',
  'pg_description',
  'pg_init_privs',
  'pg_default_acl',
  'pg_statistic',
  'pg_shdepend',
  'pg_authid',
  'pg_auth_members',
];

/**
 * A catalog this many times larger than its live rows is rewritten (VACUUM FULL), not just
 * vacuumed: a plain vacuum frees the dead rows' space for reuse but a scan still reads every page.
 */
const BLOATED = 4;
/** Below this a catalog is left its size whatever its live rows: a rewrite would save nothing. */
const BLOATED_MIN_BYTES = 8 * 1024 * 1024;

/**
 * Vacuums the system catalogs of the test database and of the databases tests make
 * (`sideeffect_test_*`), and rewrites one that grew far past its live rows, so one run's time
 * does not depend on how many ran before it. Another run may be using the catalogs: a vacuum
 * skips one it cannot lock at once, and a rewrite waits at most a few seconds for its lock.
 * Returns the catalogs rewritten.
 */
export async function vacuumCatalogs(): Promise<string[]> {
  const rewritten: string[] = [];
  const main = new pg.Client({ connectionString: databaseUrl(), connectionTimeoutMillis: 5_000 });
  await main.connect();
  let names: string[];
  try {
    const { rows } = await main.query<{ datname: string }>(
      `select datname from pg_catalog.pg_database
        where datname = current_database() or datname like 'sideeffect\\_test\\_%'`,
    );
    names = rows.map((row) => row.datname);
  } finally {
    await main.end();
  }
  for (const name of names) {
    const url = new URL(databaseUrl());
    url.pathname = `/${name}`;
    const client = new pg.Client({
      connectionString: url.toString(),
      connectionTimeoutMillis: 5_000,
    });
    await client.connect();
    try {
      await client.query(
        `vacuum (skip_locked) ${CATALOGS.map((catalog) => `pg_catalog.${catalog}`).join(', ')}`,
      );
      for (const catalog of CATALOGS) {
        const { rows } = await client.query<{ size: string; live: string | null }>(
          `select pg_catalog.pg_relation_size($1::regclass) as size,
                  (select sum(pg_catalog.pg_column_size(t.*)) from pg_catalog.${catalog} t) as live`,
          [`pg_catalog.${catalog}`],
        );
        const size = Number(rows[0]?.size ?? 0);
        const live = Number(rows[0]?.live ?? 0);
        if (size < BLOATED_MIN_BYTES || size < BLOATED * live) continue;
        try {
          await client.query(`set lock_timeout = '5s'`);
          await client.query(`vacuum full pg_catalog.${catalog}`);
          rewritten.push(`${name}.${catalog}`);
        } catch {
          // Busy (another run holds it): the plain vacuum above has freed its dead rows.
        } finally {
          await client.query('reset lock_timeout');
        }
      }
    } finally {
      await client.end();
    }
  }
  return rewritten;
}
