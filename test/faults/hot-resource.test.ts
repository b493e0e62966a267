/**
 * Hot-resource lane of the fault harness (issue 31), at the store (hot-resource-lane.ts): one
 * resource taken in turn by long transactional effects while 80 callers drive effects on it
 * through one store on a pool of 10, and effects on other resources run meanwhile. The busy
 * resource must not take the pool from them: at most one of the pool's connections waits on the
 * hot row at a time, and every unrelated effect is applied while it is hot. The checker then
 * judges from the ledger and the store: 0 duplicates, 0 stale writes landed (per resource, in
 * commit order, a fence below an earlier one), 0 keys stuck, every done key written once. How
 * long the unrelated effects take while hot against idle is a figure of `npm run bench`
 * (bench/hot-resource.bench.ts), not a test: a loaded machine moves latencies, not these counts.
 * `npm test` runs it small; `npm run test:long` with more rounds of holders and callers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type PgHarness, pgHarness } from '../store/pg-support/harness.js';
import { sized } from '../support/tier.js';
import { CALLERS, quantile, runHotResourceLane } from './hot-resource-lane.js';

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness('hot_faults', { movableClock: false });
});
afterAll(async () => {
  await h?.close();
});

describe('fault injection, a hot resource: the pool stays with the other resources', () => {
  it('80 callers of a resource long transactions hold in turn: one connection waits on it at most, unrelated effects are applied meanwhile; no duplicate, no stale write, no stuck key', async () => {
    const rounds = sized(1, 4);
    const busySamples = 30;
    const lane = await runHotResourceLane(h.db, {
      rounds,
      holdRuns: sized(8, 25),
      busySamples,
    });
    const { keys, tally } = lane;
    const duplicates = await h.db.pool.query<{ key: string }>(
      'select key from ledger group by key having count(*) > 1',
    );
    const stale = await h.db.pool.query<{ resource: string }>(
      `select resource from (
         select resource, fence, max(fence) over (partition by resource order by seq
           rows between unbounded preceding and 1 preceding) as before
         from ledger) ordered
       where fence < before`,
    );
    const states = await h.db.pool.query<{ key: string; state: string; written: number }>(
      `select k.key, k.state, (select count(*)::int from ledger l where l.key = k.key) as written
         from keys k where k.key = any($1)`,
      [keys],
    );
    const notDone = states.rows.filter((r) => r.state !== 'done');
    const doneUnwritten = states.rows.filter((r) => r.state === 'done' && r.written !== 1);
    const report = {
      ...tally,
      keys: keys.length,
      duplicates: duplicates.rowCount,
      staleLanded: stale.rowCount,
      stuck: notDone.length,
      mostWaiting: lane.mostWaiting,
      waitersSeen: lane.waitersSeen,
      idle: { n: lane.idle.length, p99: quantile(lane.idle, 0.99) },
      busy: { n: lane.busy.length, p99: quantile(lane.busy, 0.99) },
    };
    process.stdout.write(`hot-resource lane: ${JSON.stringify(report)}\n`);
    expect(duplicates.rows).toEqual([]);
    expect(stale.rows).toEqual([]);
    expect(notDone).toEqual([]);
    expect(doneUnwritten).toEqual([]);
    expect(states.rows).toHaveLength(keys.length);
    expect(tally.uncertain).toBe(0);
    // The callers met the held row and were turned away, many times over.
    expect(tally.contended).toBeGreaterThan(CALLERS);
    // The pool stayed with the other resources: the bound in the process lets one acquire at a
    // time wait on the hot row (waitersPerResource), and unrelated effects ran while it was hot.
    expect(lane.mostWaiting).toBeLessThanOrEqual(1);
    expect(lane.busy.length).toBeGreaterThanOrEqual(rounds * busySamples);
  }, 300_000);
});
