/**
 * migrate(): versioned .sql files applied once, in one transaction, safe when several workers
 * start together; refuses a schema migrated by a newer version or whose applied files changed.
 */
import { readdir } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';

let db: FreshSchema;
beforeAll(async () => {
  db = await freshSchema('pg_migrate');
});
afterAll(() => db?.drop());

describe('migrate', () => {
  it('creates a missing schema even when several workers start at once, then is a no-op', async () => {
    // A schema name that needs quoting, created by migrate itself.
    const schema = `${db.schema} "Weird" ü`;
    try {
      const runs = await Promise.all(Array.from({ length: 6 }, () => migrate(db.pool, { schema })));
      // Every migration file once, in order, whichever worker applied them.
      const files = (
        await readdir(new URL('../../src/store/postgres/migrations/', import.meta.url))
      )
        .filter((name) => name.endsWith('.sql'))
        .sort();
      expect(files[0]).toBe('0001_init.sql');
      expect(runs.flat()).toEqual(files);
      expect(await migrate(db.pool, { schema })).toEqual([]);
      const store = new PgStore({ pool: db.pool, schema });
      expect((await store.acquire({ key: 'k', resource: 'r' }, 1_000)).outcome).toBe('applied');
    } finally {
      await db.pool.query(`drop schema if exists "${schema.replaceAll('"', '""')}" cascade`);
    }
  });

  it('refuses a schema with an edited or unknown migration', async () => {
    await migrate(db.pool, { schema: db.schema });
    const { rows } = await db.pool.query('select sha256 from migrations where version = 1');
    await db.pool.query(`update migrations set sha256 = 'edited' where version = 1`);
    await expect(migrate(db.pool, { schema: db.schema })).rejects.toMatchObject({
      code: 'MIGRATION_CONFLICT',
      message: expect.stringMatching(/was changed/),
    });
    await db.pool.query('update migrations set sha256 = $1 where version = 1', [rows[0].sha256]);
    await db.pool.query(
      `insert into migrations (version, name, sha256) values (9999, '9999_future.sql', 'x')`,
    );
    await expect(migrate(db.pool, { schema: db.schema })).rejects.toMatchObject({
      code: 'MIGRATION_CONFLICT',
      message: expect.stringMatching(/unknown to this version/),
    });
  });
});
