/**
 * The hot-resource lane of the fault harness (issue 31), at the store: one resource is taken in
 * turn by transactional effects whose work holds its row for hundreds of milliseconds, while 80
 * callers drive effects on it (plain ones writing through PgFencedSink, transactional ones)
 * through one store on a pool of 10, as 80 activities of one worker would. Meanwhile effects on
 * other resources run one after another, idle before and after each round and while the resource
 * is hot. test/faults/hot-resource.test.ts judges what the lane leaves (counts: duplicates, stale
 * writes, stuck keys, connections waiting on the hot row); bench/hot-resource.bench.ts reports
 * the unrelated effects' latency while hot against idle, a ratio a loaded machine moves.
 */
import pg from 'pg';
import { type Action, type Execution, Runner } from '../../src/core/index.js';
import { PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type LockWaiter, lockWaiters } from '../support/lock-waits.js';

export const TTL_MS = 2_000;
export const LOCK_WAIT_MS = 200;
export const CALLERS = 80;
/** The worker under test: one store, a pool of 10, as `new pg.Pool()` gives by default. */
export const POOL_SIZE = 10;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface Tally {
  applied: number;
  replayed: number;
  contended: number;
  failed: number;
  uncertain: number;
}

export interface LaneReport {
  tally: Tally;
  /** Every key the lane drove. */
  keys: string[];
  /** Milliseconds of each unrelated effect with nothing hot. */
  idle: number[];
  /** Milliseconds of each unrelated effect while the resource was hot. */
  busy: number[];
  /**
   * The most connections of the worker's pool seen waiting on a lock at once, each for more than
   * 50 ms of the wait itself: a first look gives up after 5 ms, a bounded waiter waits longer.
   */
  mostWaiting: number;
  /** What those connections were waiting for, the first time more than one was seen. */
  waitersSeen: LockWaiter[];
}

const LEDGER = 'insert into ledger (key, resource, fence, mode) values ($1, $2, $3, $4)';

/**
 * Runs the lane on a migrated schema (it creates its `ledger` table there): `rounds` rounds of
 * `holdRuns` holders at least, each round going on until `busySamples` unrelated effects ran
 * while hot (ten times the holders at most), so it ends on work done, not on a clock.
 */
export async function runHotResourceLane(
  db: { config: pg.PoolConfig; schema: string; pool: pg.Pool },
  options: { rounds: number; holdRuns: number; busySamples: number },
): Promise<LaneReport> {
  await db.pool.query(`create table ledger (
    seq bigserial primary key, key text not null, resource text not null, fence bigint not null,
    mode text not null)`);
  const app = `hot-lane-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  const pool = new pg.Pool({ ...db.config, max: POOL_SIZE, application_name: app });
  pool.on('error', () => {});
  const store = new PgStore({ pool, schema: db.schema, lockWaitMs: LOCK_WAIT_MS });
  const sink = new PgFencedSink({ pool, schema: db.schema, lockWaitMs: LOCK_WAIT_MS });
  // The long transactional holders come from another worker.
  const holderPool = new pg.Pool({ ...db.config, max: 4 });
  holderPool.on('error', () => {});
  const holders = new PgStore({ pool: holderPool, schema: db.schema });
  const runner = new Runner(store, { ttlMs: TTL_MS });
  const holderRunner = new Runner(holders, { ttlMs: TTL_MS });
  const tally: Tally = { applied: 0, replayed: 0, contended: 0, failed: 0, uncertain: 0 };
  const keys: string[] = [];

  /** A plain effect writing through the sink, or a transactional one writing in the store's transaction. */
  const attempt = (r: Runner, a: Action, mode: 'plain' | 'tx', holdMs: number) => {
    if (mode === 'tx') {
      return r.executeInTransaction<pg.PoolClient>(a, async ({ tx, fence }) => {
        await tx.query(LEDGER, [a.key, a.resource, fence, 'tx']);
        if (holdMs > 0) await sleep(holdMs);
        return { payload: bytes(`tx ${fence}`) };
      });
    }
    return r.execute(a, async ({ lease }) => {
      await sink.writeFenced(a.resource, lease.fence, async (tx) => {
        await tx.query(LEDGER, [a.key, a.resource, lease.fence, 'plain']);
      });
      return { payload: bytes(`plain ${lease.fence}`) };
    });
  };

  /** Drives one action until it is done, retrying as an activity would (after the answer's delay). */
  const drive = async (
    r: Runner,
    a: Action,
    mode: 'plain' | 'tx',
    holdMs = 0,
    answered: () => void = () => {},
  ): Promise<void> => {
    keys.push(a.key);
    for (let i = 0; i < 2_000; i++) {
      let execution: Execution;
      try {
        execution = await attempt(r, a, mode, holdMs);
        answered();
      } catch {
        tally.failed += 1;
        await sleep(20);
        continue;
      }
      switch (execution.outcome) {
        case 'applied':
          tally.applied += 1;
          return;
        case 'replayed':
          tally.replayed += 1;
          return;
        case 'contended':
          tally.contended += 1;
          await sleep(Math.max(20, execution.retryAfterMs));
          break;
        case 'failed':
          tally.failed += 1;
          await sleep(20);
          break;
        case 'uncertain':
          // Nothing here loses a holder's lease or a write's answer: an uncertain key is a failure.
          tally.uncertain += 1;
          return;
      }
    }
    throw new Error(`${a.key} never finished`);
  };

  let u = 0;
  /** One effect on a resource nobody else uses, timed. */
  const unrelated = async (): Promise<number> => {
    u += 1;
    const started = performance.now();
    await drive(runner, { key: `u-${u}`, resource: `u-${u}`, payload: bytes(`u-${u}`) }, 'plain');
    return performance.now() - started;
  };

  const idle: number[] = [];
  const busy: number[] = [];
  let mostWaiting = 0;
  let waitersSeen: LockWaiter[] = [];
  try {
    for (let i = 0; i < 10; i++) await unrelated(); // warm
    for (let i = 0; i < 60; i++) idle.push(await unrelated());
    for (let round = 0; round < options.rounds; round++) {
      let hot = true;
      const sampledBefore = busy.length;
      const sampledEnough = () => busy.length - sampledBefore >= options.busySamples;
      // The other worker's transactional effects, one after another, each holding the row.
      const holding = (async () => {
        // A starved pool would sample nothing: then ten times the holders, and the count fails.
        for (
          let i = 0;
          i < options.holdRuns || (!sampledEnough() && i < 10 * options.holdRuns);
          i++
        ) {
          const a = { key: `hold-${round}-${i}`, resource: 'hot', payload: bytes(`h${i}`) };
          await drive(holderRunner, a, 'tx', 300 + Math.floor(Math.random() * 300));
        }
      })();
      // Give the first holder its grant before the callers come.
      await sleep(100);
      let firstAnswers = 0;
      const callers = Promise.all(
        Array.from({ length: CALLERS }, async (_, j) => {
          const a = { key: `hot-${round}-${j}`, resource: 'hot', payload: bytes(`c${j}`) };
          let first = true;
          await drive(runner, a, j % 4 === 3 ? 'tx' : 'plain', 0, () => {
            if (first) firstAnswers += 1;
            first = false;
          });
        }),
      );
      // Measured once every caller has had its first answer: 80 calls arriving in the same
      // instant at a resource nobody has found busy yet each look once, then they are bounded.
      const sampling = (async () => {
        while (hot && firstAnswers < CALLERS) await sleep(10);
        while (hot) busy.push(await unrelated());
      })();
      const watcher = (async () => {
        while (hot) {
          const rows = await lockWaiters(db.pool, app, 50);
          const waiting = new Set(rows.map((r) => r.pid)).size;
          if (waiting > 1 && waitersSeen.length === 0) waitersSeen = rows;
          mostWaiting = Math.max(mostWaiting, waiting);
          await sleep(25);
        }
      })();
      await holding;
      await callers;
      hot = false;
      await Promise.all([sampling, watcher]);
      for (let i = 0; i < 20; i++) idle.push(await unrelated());
    }
    await sleep(TTL_MS + 100);
    await store.sweep();
  } finally {
    await pool.end();
    await holderPool.end();
  }
  return { tally, keys, idle, busy, mostWaiting, waitersSeen };
}

/** The q-quantile of `samples` (nearest rank). */
export function quantile(samples: number[], q: number): number {
  const sorted = [...samples].sort((x, y) => x - y);
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}
