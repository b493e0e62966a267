/** PgStore.purge in batches: every old done key goes, with its events, in several short transactions. */
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InvalidActionError } from '../../src/core/index.js';
import { PgStore } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

describe('PgStore.purge in batches', () => {
  let h: PgHarness;
  beforeEach(async () => {
    h = await pgHarness('pg_purge');
  });
  afterEach(() => h.close());

  it('deletes every old done key and its events across batches, never an uncertain one', async () => {
    const store = new PgStore({ pool: h.db.pool, schema: h.db.schema, purgeBatchSize: 3 });
    for (let i = 0; i < 10; i++) {
      const action = { key: `done-${i}`, resource: `r-${i}` };
      const granted = await store.acquire(action, 1_000, { applying: true });
      if (granted.outcome !== 'granted') throw new Error(granted.outcome);
      await store.complete(action, granted.lease, { payload: bytes('ok') });
    }
    const stuck = { key: 'stuck', resource: 'r-stuck' };
    const held = await store.acquire(stuck, 1_000, { applying: true });
    if (held.outcome !== 'granted') throw new Error(held.outcome);
    await store.markUncertain(stuck, held.lease, 'lost');
    await h.advance(60_000);

    // Count the batches at the connection: 3 + 3 + 3 + 1 keys.
    let batches = 0;
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      if ((args[0] as { text?: string })?.text?.includes('purge_batch')) batches += 1;
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof query;
    try {
      expect(await store.purge({ olderThanMs: 30_000, force: true })).toBe(10);
    } finally {
      pg.Client.prototype.query = query;
    }
    expect(batches).toBe(4);
    const left = await h.db.pool.query('select key from keys');
    expect(left.rows).toEqual([{ key: 'stuck' }]);
    const events = await h.db.pool.query('select distinct key from events');
    expect(events.rows).toEqual([{ key: 'stuck' }]);
    expect(await store.purge({ olderThanMs: 30_000, force: true })).toBe(0);
  });

  it('refuses a batch size that is not a positive integer', () => {
    for (const purgeBatchSize of [0, -1, 1.5, Number.NaN]) {
      expect(() => new PgStore({ pool: h.db.pool, purgeBatchSize })).toThrow(InvalidActionError);
    }
  });

  it('refuses a duty cycle outside (0, 1]', () => {
    for (const purgeDutyCycle of [0, -0.5, 1.5, Number.NaN, '0.5' as unknown as number]) {
      expect(() => new PgStore({ pool: h.db.pool, purgeDutyCycle })).toThrow(InvalidActionError);
    }
    expect(() => new PgStore({ pool: h.db.pool, purgeDutyCycle: 1 })).not.toThrow();
  });
});
