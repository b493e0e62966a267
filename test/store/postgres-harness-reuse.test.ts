/**
 * The harness's schemas are migrated once per file and handed to the next test emptied
 * (test/support/migrated-schemas.ts): a test must find its schema as a new one would be, whatever
 * the test before it left there, or get a new one.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { sweepLockKey } from '../../src/store/postgres/sweep-leader.js';
import { pgHarness } from './pg-support/harness.js';

const TTL = 10_000;

describe('pgHarness, a schema given back and taken again', () => {
  it('is as new: no rows, fences and ids from 1, the clock back at now', async () => {
    const first = await pgHarness('pg_reuse');
    const schema = first.db.schema;
    const a = { key: 'k', resource: 'r' };
    const acq = await first.store.acquire(a, TTL);
    if (acq.outcome !== 'granted') throw new Error(acq.outcome);
    await first.store.markUncertain(a, acq.lease, 'lost');
    expect(
      (await first.store.addPendingVerdict('k', { applied: false, reason: 'no' })).outcome,
    ).toBe('held');
    await first.sink.writeFenced('r', acq.lease.fence, async () => {});
    await first.advance(3_600_000);
    await first.close();

    const second = await pgHarness('pg_reuse');
    try {
      expect(second.db.schema).toBe(schema);
      const { rows } = await second.db.pool.query<{ n: number; behind: boolean }>(
        `select (select count(*) from keys) + (select count(*) from resources)
              + (select count(*) from events) + (select count(*) from pending_verdicts)
              + (select count(*) from reconcile_starts) + (select count(*) from sink_fences) as n,
                (select at from test_clock) > clock_timestamp() + interval '1 minute' as behind`,
      );
      expect(rows[0]).toEqual({ n: '0', behind: false });
      const again = await second.store.acquire({ key: 'k2', resource: 'r' }, TTL);
      expect(again.outcome === 'granted' && again.lease.fence).toBe(1);
      const events = await second.db.pool.query<{ id: string }>('select id from events');
      expect(events.rows.map((row) => row.id)).toEqual(['1']);
    } finally {
      await second.close();
    }
  });

  it('one whose sweep leader lock a session still holds is dropped: no leader carries over', async () => {
    const first = await pgHarness('pg_reuse');
    const schema = first.db.schema;
    // A session the test did not end, as a pooler's server side can outlive its client.
    const stray = new pg.Client(first.db.config);
    await stray.connect();
    try {
      await stray.query(`select pg_advisory_lock(${sweepLockKey(schema)}::bigint)`);
      await first.close();
    } finally {
      await stray.end();
    }
    const second = await pgHarness('pg_reuse');
    try {
      expect(second.db.schema).not.toBe(schema);
      expect(await second.store.leadSweep?.(second)).toBe(true);
      await second.store.resignSweep?.(second);
    } finally {
      await second.close();
    }
  });

  it('one whose catalog a test changed is dropped: the next test gets a new schema', async () => {
    const first = await pgHarness('pg_reuse');
    const schema = first.db.schema;
    await first.db.pool.query('alter table keys add column extra text');
    await first.close();
    const second = await pgHarness('pg_reuse');
    try {
      expect(second.db.schema).not.toBe(schema);
      const { rowCount } = await second.db.pool.query(
        'select from pg_namespace where nspname = $1',
        [schema],
      );
      expect(rowCount).toBe(0);
    } finally {
      await second.close();
    }
  });
});
