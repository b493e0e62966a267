/**
 * PgStore's statements are prepared once per connection, and after five runs Postgres keeps one
 * generic plan for them, made from the table's statistics of that moment. A store starts empty, so
 * that moment is usually a nearly empty table: the plan kept must still read one key by its primary
 * key, not scan an index whose every entry later becomes a done key.
 */
import pg from 'pg';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { Runner } from '../../src/core/index.js';
import { payloadDigest } from '../../src/store/digest.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';

const TTL = 10_000;
let db: FreshSchema;
let pool: pg.Pool;
let store: PgStore;

beforeEach(async () => {
  db = await freshSchema('pg_plans');
  await migrate(db.pool, { schema: db.schema });
  // One connection: every statement below is prepared, and its plan kept, on it.
  pool = new pg.Pool({ ...db.config, max: 1 });
  store = new PgStore({ pool, schema: db.schema });
});
afterEach(async () => {
  await pool.end();
  await db.drop();
});

it('the acquire plan kept from an empty table reads the key by its primary key', async () => {
  const runner = new Runner(store, { ttlMs: TTL });
  for (let n = 0; n < 8; n++) {
    const done = await runner.execute({ key: `k-${n}`, resource: `r-${n}` }, async () => ({
      payload: new Uint8Array([n]),
    }));
    expect(done.outcome).toBe('applied');
  }
  for (let n = 0; n < 8; n++) {
    expect((await store.acquire({ key: `k-${n}`, resource: `r-${n}` }, TTL)).outcome).toBe(
      'replayed',
    );
  }

  const client = await pool.connect();
  try {
    const { rows } = await client.query<{ name: string; generic_plans: string }>(
      `select name, generic_plans from pg_prepared_statements
        where statement like '%acquire_fresh(%' and name like 'sideeffect_acquire_%'`,
    );
    expect(rows).toHaveLength(1);
    expect(Number(rows[0]!.generic_plans)).toBeGreaterThan(0);
    const digest = payloadDigest(new Uint8Array(0)).toString('hex');
    const plan = await client.query<{ 'QUERY PLAN': string }>(
      `explain execute ${rows[0]!.name}('k-0', 'r-0', '\\x${digest}', 'unknown', ${TTL}, false, '1000ms')`,
    );
    const text = plan.rows.map((row) => row['QUERY PLAN']).join('\n');
    expect(text).toContain('keys_pkey');
    expect(text).not.toContain('keys_state_updated_at');
  } finally {
    client.release();
  }
});
