/**
 * Fences across a real promotion (issue 45, migration 0022): a primary with a lagging
 * asynchronous standby grants a key's fence the standby never receives; the primary dies and the
 * standby is promoted. 0.3.0's new primary handed that fence out again, and a PgFencedSink in
 * another database (separateDatabase), which holds the old holder's mark, let both holders write.
 * Now the new timeline's first fence is 2^32: the sink takes the new holder's writes and refuses
 * the old holder's.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FenceStaleError, type Lease, Runner } from '../../src/core/index.js';
import { migrate, PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { type ReplicatedPostgres, startReplicated } from '../support/replication.js';

const SCHEMA = 'sideeffect';
const TTL = 30_000;
const TIMELINE_2 = 2 ** 32;

let pair: ReplicatedPostgres;
let bank: FreshSchema;
let sink: PgFencedSink;
const pools: pg.Pool[] = [];

function poolOn(url: string): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max: 3, connectionTimeoutMillis: 5_000 });
  // The old primary's connections die with it.
  pool.on('error', () => {});
  pools.push(pool);
  return pool;
}

beforeAll(async () => {
  pair = await startReplicated({ synchronous: false });
  await migrate(poolOn(pair.primary.url), { schema: SCHEMA });
  // The "bank": a sink in another database (the shared server), which no failover touches.
  bank = await freshSchema('pg_fence_promotion');
  await migrate(bank.pool, { schema: bank.schema });
  await bank.pool.query('create table charges (key text, fence bigint, note text)');
  sink = new PgFencedSink({ pool: bank.pool, schema: bank.schema, separateDatabase: true });
}, 120_000);
afterAll(async () => {
  for (const pool of pools) await pool.end().catch(() => {});
  await pair?.stop();
  await bank?.drop();
});

const charge = (key: string, lease: Lease, note: string) =>
  sink.writeFenced(lease.resource, lease.fence, async (tx) => {
    await tx.query('insert into charges values ($1, $2, $3)', [key, lease.fence, note]);
  });

async function timeline(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string }>(
      'select pg_walfile_name(pg_current_wal_lsn()) as name',
    );
    return Number.parseInt(rows[0]!.name.slice(0, 8), 16);
  } finally {
    await client.end();
  }
}

describe('a promotion of a lagging asynchronous standby', () => {
  it('starts the new timeline at 2^32: the sink refuses the old holder, accepts the new one', async () => {
    const old = new PgStore({ pool: poolOn(pair.primary.url), schema: SCHEMA });
    const oldRunner = new Runner(old, { ttlMs: TTL });
    const first = await old.acquire({ key: 'order-1', resource: 'account-a' }, TTL);
    if (first.outcome !== 'granted') throw new Error(first.outcome);
    await charge('order-1', first.lease, 'old primary');
    await old.complete({ key: 'order-1', resource: 'account-a' }, first.lease, {
      payload: bytes('paid'),
    });
    const tx = await oldRunner.executeInTransaction(
      { key: 'tx-1', resource: 'ledger-a' },
      async () => ({
        payload: bytes('booked'),
      }),
    );
    expect(tx.outcome).toBe('applied');
    await pair.caughtUp();

    // The standby falls behind; the primary grants order-2 fence 2, which it never receives.
    await pair.detachStandby();
    const stale = await old.acquire({ key: 'order-2', resource: 'account-a' }, TTL);
    if (stale.outcome !== 'granted') throw new Error(stale.outcome);
    expect(stale.lease.fence).toBe(2);
    await charge('order-2', stale.lease, 'old holder, before the failover');
    expect(await timeline(pair.primary.url)).toBe(1);

    await pair.killPrimary();
    await pair.promote();
    expect(await timeline(pair.standby.url)).toBe(2);

    const store = new PgStore({ pool: poolOn(pair.standby.url), schema: SCHEMA });
    const runner = new Runner(store, { ttlMs: TTL });
    // The promoted standby never saw order-2: it grants it again, above any fence of timeline 1.
    expect(await store.inspect('order-2')).toBeUndefined();
    const fresh = await store.acquire({ key: 'order-2', resource: 'account-a' }, TTL);
    if (fresh.outcome !== 'granted') throw new Error(fresh.outcome);
    expect(fresh.lease.fence).toBe(TIMELINE_2);
    await charge('order-2', fresh.lease, 'new holder');
    await expect(charge('order-2', stale.lease, 'old holder, after')).rejects.toBeInstanceOf(
      FenceStaleError,
    );
    expect(await sink.highestFence('account-a')).toBe(TIMELINE_2);
    await store.complete({ key: 'order-2', resource: 'account-a' }, fresh.lease, {
      payload: bytes('paid'),
    });

    // Later grants count on by one; a transactional grant jumps the same way.
    const next = await store.acquire({ key: 'order-3', resource: 'account-a' }, TTL);
    if (next.outcome !== 'granted') throw new Error(next.outcome);
    expect(next.lease.fence).toBe(TIMELINE_2 + 1);
    const tx2 = await runner.executeInTransaction(
      { key: 'tx-2', resource: 'ledger-a' },
      async () => ({
        payload: bytes('booked'),
      }),
    );
    expect(tx2).toMatchObject({ outcome: 'applied', lease: { fence: TIMELINE_2 } });

    const { rows } = await bank.pool.query<{ fence: string; note: string }>(
      'select fence, note from charges order by fence, note',
    );
    expect(rows).toEqual([
      { fence: '1', note: 'old primary' },
      { fence: '2', note: 'old holder, before the failover' },
      { fence: String(TIMELINE_2), note: 'new holder' },
    ]);
  }, 120_000);
});
