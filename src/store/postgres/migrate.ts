import { createHash } from 'node:crypto';
import type pg from 'pg';
import { MigrationConflictError, StoreUnavailableError } from '../../core/errors.js';
import { embeddedMigrations } from './migrations.generated.js';
import { checkoutFor } from './session.js';
import { DEFAULT_SCHEMA, quoteSchema } from './sql.js';

/** Arbitrary, fixed first half of the advisory lock key; the second half is the schema's hash. */
const LOCK_CLASS = 0x5e1d;

/** One versioned schema change, as shipped in this version of the library. */
export interface Migration {
  /** The file's number: applied in ascending order, recorded in the schema's `migrations` table. */
  readonly version: number;
  /** The file name, e.g. `0001_init.sql`. */
  readonly name: string;
  /** The SQL, naming no schema: run it with `search_path` set to the target schema. */
  readonly sql: string;
  /** Hex sha-256 of `sql`; `migrate()` refuses a schema whose recorded hash differs. */
  readonly sha256: string;
}

/** Where the schema records what was applied; created by `migrate()` and by `migrationScript()`. */
const MIGRATIONS_TABLE = `create table if not exists migrations (
  version int primary key,
  name text not null,
  sha256 text not null,
  applied_at timestamptz not null default now()
)`;

/**
 * Every migration of this version, in the order to apply them. For teams whose own migration
 * tool owns the database: feed these to it (with `search_path` set to the schema), or take the
 * whole script from `migrationScript()`. Embedded in the code, so it works from a bundle too.
 */
export function listMigrations(): readonly Migration[] {
  return embeddedMigrations.map(({ version, name, sql }) => ({
    version,
    name,
    sql,
    sha256: createHash('sha256').update(sql).digest('hex'),
  }));
}

/**
 * One SQL script that brings a schema with none of these migrations up to date and records them
 * as `migrate()` does, so a worker calling `migrate()` later finds nothing to do. It takes the
 * same advisory lock as `migrate()`. `sideeffect migrate --print-sql` prints it.
 *
 * @example
 * ```ts
 * import { writeFileSync } from 'node:fs';
 * import { migrationScript } from 'sideeffect/postgres';
 * writeFileSync('V7__sideeffect.sql', migrationScript({ schema: 'sideeffect' }));
 * ```
 */
export function migrationScript(options: { schema?: string } = {}): string {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const schema = quoteSchema(schemaName);
  const literal = (text: string) => `'${text.replaceAll("'", "''")}'`;
  const parts = [
    `-- sideeffect schema ${schemaName}: ${listMigrations()
      .map((m) => m.name)
      .join(', ')}`,
    'begin isolation level read committed;',
    `select pg_catalog.pg_advisory_xact_lock(${LOCK_CLASS}, pg_catalog.hashtext(${literal(schema)}));`,
    `create schema if not exists ${schema};`,
    `set local search_path to ${schema}, pg_temp;`,
    `${MIGRATIONS_TABLE};`,
  ];
  for (const migration of listMigrations()) {
    parts.push(
      `-- ${migration.name}`,
      migration.sql.trimEnd(),
      `insert into migrations (version, name, sha256) values (${migration.version}, ${literal(migration.name)}, ${literal(migration.sha256)});`,
    );
  }
  parts.push('commit;', '');
  return parts.join('\n');
}

/**
 * Brings the store's schema up to date: applies the migrations not yet recorded, in order, in ONE
 * transaction (all or nothing), and records each. Idempotent, and safe when several workers start
 * at once: a transaction-scoped advisory lock per schema makes them take turns, so none sees a
 * half-made schema or fails on a `create` that raced another. Refuses a schema that a newer
 * version of this library migrated, or whose applied migrations were edited afterwards: running
 * functions this code does not know is how a state machine silently changes under a worker.
 * Returns the names of the migrations it applied (empty when already up to date). Any other
 * failure (the database unreachable, a connection lost, a statement refused) is a
 * StoreUnavailableError with the cause, and nothing was applied.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await migrate(pool, { schema: 'sideeffect' }); // before the worker starts
 * ```
 */
export async function migrate(
  pool: pg.Pool,
  options: {
    /**
     * The schema holding the store's tables and functions.
     * @default `'sideeffect'`
     */
    schema?: string;
  } = {},
): Promise<string[]> {
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const files = listMigrations();
  const session = await checkoutFor(pool, 'migrate');
  const { client } = session;
  try {
    await client.query('begin isolation level read committed');
    await client.query(
      'select pg_catalog.pg_advisory_xact_lock($1::int4, pg_catalog.hashtext($2::text))',
      [LOCK_CLASS, schema],
    );
    await client.query(`create schema if not exists ${schema}`);
    await client.query(`set local search_path to ${schema}, pg_temp`);
    await client.query(MIGRATIONS_TABLE);
    const { rows } = await client.query<{ version: number; name: string; sha256: string }>(
      'select version, name, sha256 from migrations order by version',
    );
    const known = new Map(files.map((f) => [f.version, f]));
    for (const row of rows) {
      const file = known.get(row.version);
      if (!file) {
        throw new MigrationConflictError(
          `schema ${schema} has migration ${row.name}, unknown to this version of sideeffect: upgrade it`,
        );
      }
      if (file.sha256 !== row.sha256) {
        throw new MigrationConflictError(
          `migration ${row.name} was changed after it was applied to ${schema}`,
        );
      }
    }
    const applied = new Set(rows.map((row) => row.version));
    const pending = files.filter((f) => !applied.has(f.version));
    for (const file of pending) {
      await client.query(file.sql);
      await client.query('insert into migrations (version, name, sha256) values ($1, $2, $3)', [
        file.version,
        file.name,
        file.sha256,
      ]);
    }
    await client.query('commit');
    session.release();
    return pending.map((f) => f.name);
  } catch (error) {
    await client.query('rollback').catch(() => {});
    session.release(true);
    if (error instanceof MigrationConflictError) throw error;
    throw new StoreUnavailableError('migrate', error);
  }
}
