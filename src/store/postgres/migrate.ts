import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import type pg from 'pg';
import { MigrationConflictError, StoreUnavailableError } from '../../core/errors.js';
import { checkout, type Session } from './session.js';
import { DEFAULT_SCHEMA, quoteSchema } from './sql.js';

/** The versioned `.sql` files, read beside this module so they are found from src and from dist. */
const MIGRATIONS_DIR = new URL('./migrations/', import.meta.url);
const MIGRATION_FILE = /^(\d{4})_[a-z0-9_]+\.sql$/;

/** Arbitrary, fixed first half of the advisory lock key; the second half is the schema's hash. */
const LOCK_CLASS = 0x5e1d;

interface Migration {
  version: number;
  name: string;
  sql: string;
  sha256: string;
}

async function migrations(): Promise<Migration[]> {
  const files = (await readdir(MIGRATIONS_DIR)).filter((f) => MIGRATION_FILE.test(f)).sort();
  return Promise.all(
    files.map(async (name) => {
      const sql = await readFile(new URL(name, MIGRATIONS_DIR), 'utf8');
      return {
        version: Number(MIGRATION_FILE.exec(name)![1]),
        name,
        sql,
        sha256: createHash('sha256').update(sql).digest('hex'),
      };
    }),
  );
}

/**
 * Brings the store's schema up to date: applies the migration files not yet recorded, in order,
 * in ONE transaction (all or nothing), and records each. Idempotent, and safe when several
 * workers start at once: a transaction-scoped advisory lock per schema makes them take turns, so
 * none sees a half-made schema or fails on a `create` that raced another. Refuses a schema that a
 * newer version of this library migrated, or whose applied files were edited afterwards: running
 * functions this code does not know is how a state machine silently changes under a worker.
 * Returns the names of the files it applied (empty when already up to date). Any other failure
 * (the database unreachable, a connection lost, a statement refused) is a StoreUnavailableError
 * with the cause, and nothing was applied.
 */
export async function migrate(pool: pg.Pool, options: { schema?: string } = {}): Promise<string[]> {
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const files = await migrations();
  let session: Session;
  try {
    session = await checkout(pool);
  } catch (error) {
    throw new StoreUnavailableError('migrate', error);
  }
  const { client } = session;
  try {
    await client.query('begin isolation level read committed');
    await client.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_CLASS, schema]);
    await client.query(`create schema if not exists ${schema}`);
    await client.query(`set local search_path to ${schema}, pg_temp`);
    await client.query(
      `create table if not exists migrations (
         version int primary key,
         name text not null,
         sha256 text not null,
         applied_at timestamptz not null default now()
       )`,
    );
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
