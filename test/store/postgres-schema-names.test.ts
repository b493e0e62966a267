/**
 * Schema names (issue 24): checked when the store, sink, stats or migrate is set up, with a typed
 * error naming the broken rule; any other name works, `$1` and quotes included, and no rewrite of
 * the statement text ever splices a caller's value into it. The `$1` case runs on a database whose
 * default isolation is SERIALIZABLE, where statements are sent with their values inlined.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { InvalidSchemaError } from '../../src/core/index.js';
import {
  migrate,
  migrationScript,
  PgFencedSink,
  PgStore,
  storeStats,
} from '../../src/store/postgres/index.js';
import { databaseWithDefaultIsolation } from '../support/postgres.js';

describe('schema names', () => {
  it.each([
    ['', 'empty'],
    ['a\0b', 'nul'],
    ['x'.repeat(64), 'too-long'],
    ['é'.repeat(32), 'too-long'],
    ['pg_sideeffect', 'reserved'],
  ])('%j is refused at construction: rule %s', async (schema, rule) => {
    const pool = new pg.Pool({ max: 1 });
    try {
      for (const make of [
        () => new PgStore({ pool, schema }),
        () => new PgFencedSink({ pool, schema }),
        () => migrationScript({ schema }),
      ]) {
        expect(make).toThrow(InvalidSchemaError);
        expect(make).toThrow(expect.objectContaining({ code: 'INVALID_SCHEMA', rule }));
      }
      await expect(migrate(pool, { schema })).rejects.toMatchObject({
        code: 'INVALID_SCHEMA',
        rule,
      });
      await expect(storeStats(pool, { schema })).rejects.toMatchObject({
        code: 'INVALID_SCHEMA',
        rule,
      });
    } finally {
      await pool.end();
    }
  });

  it('a $1, quotes and a comment marker in the name are only a name, even with values inlined', async () => {
    const url = await databaseWithDefaultIsolation('serializable');
    const schema = `t_$1"'-- $$x$$ /*${randomBytes(3).toString('hex')}`;
    const quoted = `"${schema.replaceAll('"', '""')}"`;
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    pool.on('error', () => {});
    try {
      await migrate(pool, { schema });
      const store = new PgStore({ pool, schema });
      // A key whose text, spliced outside a literal, would be SQL of its own.
      const key = `k"; select pg_sleep(5); --`;
      const acq = await store.acquire({ key, resource: '$2' }, 10_000);
      expect(acq.outcome).toBe('granted');
      expect((await store.inspect(key))?.resource).toBe('$2');
      expect((await store.list()).map((r) => r.key)).toEqual([key]);
      const { rows } = await pool.query(`select key, resource from ${quoted}.keys`);
      expect(rows).toEqual([{ key, resource: '$2' }]);
    } finally {
      await pool.query(`drop schema if exists ${quoted} cascade`);
      await pool.end();
    }
  });
});
