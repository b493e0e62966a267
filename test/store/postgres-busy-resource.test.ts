/**
 * A busy resource does not stall the worker (issue 31, item 3). A transactional holder keeps its
 * resource's row locked for its whole work: every store call that meets that row gives up after
 * the lock bound with a typed, retryable answer, and at most `waitersPerResource` of one store's
 * acquire calls wait for it at a time (the rest answer `contended` without a pool connection), so
 * 80 callers of the busy resource leave the pool to every other resource.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Action,
  ContendedError,
  isNotApplied,
  type Lease,
  Runner,
} from '../../src/core/index.js';
import { payloadDigest } from '../../src/store/digest.js';
import { PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { type BatchingMode, batchingOption } from '../support/batching.js';
import { bytes } from '../support/bytes.js';
import { lockWaiters } from '../support/lock-waits.js';
import { SQL_0_1_0 } from './fixtures/release-0.1.0.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

const LOCK_WAIT_MS = 200;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let h: PgHarness;
/** The transactional holders' own pool, as another worker's. */
let holderPool: pg.Pool;
let holders: PgStore;
beforeAll(async () => {
  h = await pgHarness('pg_busy');
  holderPool = new pg.Pool({ ...h.db.config, max: 4 });
  holderPool.on('error', () => {});
  holders = new PgStore({ pool: holderPool, schema: h.db.schema });
});
afterAll(async () => {
  await holderPool?.end();
  await h?.close();
});

/**
 * A transactional effect on `resource` from another worker, granted and holding the resource's
 * row until `end()`: its work waits. The TTL outlives the test by far, so only `end()` frees it.
 */
async function transactionalHolder(resource: string): Promise<{ end(): Promise<void> }> {
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });
  let working!: () => void;
  const granted = new Promise<void>((resolve) => {
    working = resolve;
  });
  const execution = new Runner(holders, { ttlMs: 120_000 }).executeInTransaction(
    { key: `tx-${resource}`, resource },
    async () => {
      working();
      await finished;
      return { payload: bytes('tx') };
    },
  );
  execution.catch(() => {});
  await Promise.race([granted, execution.then((e) => Promise.reject(new Error(e.outcome)))]);
  return {
    async end() {
      finish();
      expect((await execution).outcome).toBe('applied');
    },
  };
}

/** A pool of its own, as a worker's, and a store on it with the lock bound of this file. */
function workerStore(
  batching: BatchingMode,
  poolConfig: pg.PoolConfig,
): { pool: pg.Pool; store: PgStore } {
  const pool = new pg.Pool({ ...h.db.config, ...poolConfig });
  pool.on('error', () => {});
  const store = new PgStore({
    pool,
    schema: h.db.schema,
    lockWaitMs: LOCK_WAIT_MS,
    batching: batchingOption(batching),
  });
  return { pool, store };
}

/**
 * How `call` settled: its error, or undefined. The holder keeps the row until the test ends it,
 * so a call that settles at all did not wait for the holder: the lock bound answered it (the
 * error's cause says so), however loaded the machine. One still waiting after 10 s never would.
 */
async function settled(call: () => Promise<unknown>): Promise<{ error?: unknown }> {
  const stalled = sleep(10_000).then(() => new Error('still waiting after 10 s'));
  const error = await Promise.race([
    call().then(
      () => undefined,
      (e: unknown) => e,
    ),
    stalled,
  ]);
  return { error };
}

describe.each(['on', 'off'] as const satisfies BatchingMode[])('batching %s', (batching) => {
  describe('a plain holder whose resource a transactional grant took over', () => {
    it('renew, complete, markUncertain, release and writeFenced answer within the lock bound, typed and retryable; then stale as ever', async () => {
      const { pool, store } = workerStore(batching, { max: 4 });
      const sink = new PgFencedSink({ pool, schema: h.db.schema, lockWaitMs: LOCK_WAIT_MS });
      try {
        const a: Action = { key: `plain-${batching}`, resource: `taken-${batching}` };
        const got = await store.acquire(a, 1_000, { applying: true });
        if (got.outcome !== 'granted') throw new Error(got.outcome);
        const lease: Lease = got.lease;
        // Its lease runs out (the store's clock), and a transactional effect takes the resource.
        await h.advance(2_000);
        const holder = await transactionalHolder(a.resource);
        try {
          const calls: Record<string, () => Promise<unknown>> = {
            renew: () => store.renew(a, lease, 1_000),
            complete: () => store.complete(a, lease, { payload: bytes('late') }),
            markUncertain: () => store.markUncertain(a, lease, 'late'),
            release: () => store.release(a, lease),
          };
          for (const [name, call] of Object.entries(calls)) {
            const { error } = await settled(call);
            expect(error, name).toMatchObject({
              code: 'CONTENDED',
              key: a.key,
              resource: a.resource,
              retryAfterMs: LOCK_WAIT_MS,
              cause: { code: '55P03' },
            });
          }
          let wrote = false;
          const { error } = await settled(() =>
            sink.writeFenced(a.resource, lease.fence, async () => {
              wrote = true;
            }),
          );
          // The resource busy, not the store down: contended, as the store answers it.
          expect(error).toBeInstanceOf(ContendedError);
          expect(error).toMatchObject({
            resource: a.resource,
            retryAfterMs: LOCK_WAIT_MS,
            cause: { code: '55P03' },
          });
          // Nothing was written: the Runner releases the key instead of marking it uncertain.
          expect(isNotApplied(error)).toBe(true);
          expect(wrote).toBe(false);
        } finally {
          await holder.end();
        }
        // The transaction committed: the plain holder is stale, as it always was.
        await expect(store.renew(a, lease, 1_000)).rejects.toMatchObject({ code: 'FENCE_STALE' });
        await expect(
          sink.writeFenced(a.resource, lease.fence, async () => {}),
        ).rejects.toMatchObject({
          code: 'FENCE_STALE',
        });
        // The connections that gave up waiting went back to the pool in working order.
        expect(pool.totalCount).toBeLessThanOrEqual(4);
        expect((await pool.query('select 1 as one')).rows[0].one).toBe(1);
      } finally {
        await pool.end();
      }
    });
  });
});

describe('a worker of release 0.1.0', () => {
  it("a 0.1.0 worker's acquire answers contended after 1 s while a transactional holder has the row", async () => {
    const holder = await transactionalHolder('old-busy');
    try {
      const started = performance.now();
      const { rows } = await h.db.pool.query(SQL_0_1_0.acquire(`"${h.db.schema}"`), [
        'old-k',
        'old-busy',
        payloadDigest(new Uint8Array()),
        'unknown',
        10_000,
        false,
      ]);
      const ms = performance.now() - started;
      expect(rows[0]).toMatchObject({ o_outcome: 'contended', o_retry_after_ms: '1000' });
      // It waited out the 1 s bound (a floor no load can break); the holder still holds the row,
      // so answering at all shows the bound ended the wait.
      expect(ms).toBeGreaterThanOrEqual(900);
      // The bound was the call's own: the session's lock_timeout is as it was.
      const setting = await h.db.pool.query(`select current_setting('lock_timeout') as t`);
      expect(setting.rows[0].t).toBe('0');
    } finally {
      await holder.end();
    }
    // And once the holder is gone, the 0.1.0 statement is granted as before.
    const { rows } = await h.db.pool.query(SQL_0_1_0.acquire(`"${h.db.schema}"`), [
      'old-k',
      'old-busy',
      payloadDigest(new Uint8Array()),
      'unknown',
      10_000,
      false,
    ]);
    expect(rows[0]).toMatchObject({ o_outcome: 'applied' });
  });
});

describe("writeFenced's bound", () => {
  /** The sink writes only at fences its schema's store issued: grant `fences` of them, in turn. */
  async function issue(resource: string, fences: number): Promise<void> {
    for (let i = 1; i <= fences; i++) {
      const action = { key: `${resource}-${i}`, resource };
      const granted = await h.store.acquire(action, 10_000);
      if (granted.outcome !== 'granted') throw new Error(`not granted: ${granted.outcome}`);
      await h.store.release(action, granted.lease);
    }
  }

  it("is the mark's alone: the write's own statements run with the session's lock_timeout", async () => {
    await issue('bound-only', 1);
    const sink = new PgFencedSink({ pool: h.db.pool, schema: h.db.schema, lockWaitMs: 150 });
    const setting = await sink.writeFenced('bound-only', 1, async (tx) => {
      const { rows } = await tx.query(`select current_setting('lock_timeout') as t`);
      return rows[0].t;
    });
    expect(setting).toBe('0');
  });

  it('a write that gives up while the same holder has another write in flight is not called not applied: that one may commit', async () => {
    await issue('twice', 2);
    const sink = new PgFencedSink({ pool: h.db.pool, schema: h.db.schema, lockWaitMs: 150 });
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => {
      finish = resolve;
    });
    let holding!: () => void;
    const held = new Promise<void>((resolve) => {
      holding = resolve;
    });
    const first = sink.writeFenced('twice', 1, async () => {
      holding();
      await finished;
    });
    await held;
    const second = await sink.writeFenced('twice', 1, async () => {}).catch((e: unknown) => e);
    expect(second).toMatchObject({ code: 'CONTENDED', cause: { code: '55P03' } });
    expect(isNotApplied(second)).toBe(false);
    finish();
    await first;
    // Alone, the same failure is a definite "not applied".
    const tx = await h.db.pool.connect();
    try {
      await tx.query('begin');
      await tx.query(`select from sink_fences where resource = 'twice' for update`);
      const alone = await sink.writeFenced('twice', 2, async () => {}).catch((e: unknown) => e);
      expect(alone).toMatchObject({ code: 'CONTENDED', cause: { code: '55P03' } });
      expect(isNotApplied(alone)).toBe(true);
    } finally {
      await tx.query('rollback');
      tx.release();
    }
  });
});

describe.each(['on', 'off'] as const satisfies BatchingMode[])('batching %s', (batching) => {
  describe('callers of one resource that meet no held row', () => {
    it('are never turned away: 40 replays of done keys at once all replay', async () => {
      const { pool, store } = workerStore(batching, { max: 10 });
      try {
        const runner = new Runner(store, { ttlMs: 10_000 });
        for (let i = 0; i < 40; i++) {
          await runner.execute(
            { key: `done-${batching}-${i}`, resource: `shared-${batching}` },
            async () => ({
              payload: bytes(`r${i}`),
            }),
          );
        }
        const answers = await Promise.all(
          Array.from({ length: 40 }, (_, i) =>
            store.acquire({ key: `done-${batching}-${i}`, resource: `shared-${batching}` }, 10_000),
          ),
        );
        expect(answers.map((answer) => answer.outcome)).toEqual(Array(40).fill('replayed'));
      } finally {
        await pool.end();
      }
    });
  });

  describe('80 callers of one busy resource, a pool of 10', () => {
    it('leave the pool to other resources: at most one of them waits at a time, and unrelated acquires are granted meanwhile', async () => {
      const app = `busy-${process.pid}`;
      const { pool, store } = workerStore(batching, { max: 10, application_name: app });
      const hot = `hot-${batching}`;
      const holder = await transactionalHolder(hot);
      let n = 0;
      /** `count` acquires, one after the other, of keys never seen on resources nobody holds. */
      const unrelated = async (count: number): Promise<void> => {
        for (let i = 0; i < count; i++) {
          n += 1;
          const got = await store.acquire(
            { key: `u-${batching}-${n}`, resource: `u-${batching}-${n}` },
            10_000,
          );
          expect(got.outcome).toBe('granted');
        }
      };
      // How long they take beside a busy resource against idle is a figure of `npm run bench`
      // (bench/hot-resource.bench.ts): a loaded machine moves a latency, not these counts.
      try {
        await unrelated(20); // warm: connections opened, statements prepared
        let mostWaiting = 0;
        let contended = 0;
        for (let round = 0; round < 5; round++) {
          let stop = false;
          let m = 0;
          let answered = 0;
          const callers = Array.from({ length: 80 }, async (_, j) => {
            let first = true;
            while (!stop) {
              m += 1;
              const got = await store.acquire(
                { key: `${hot}-${round}-${j}-${m}`, resource: hot },
                10_000,
              );
              expect(got.outcome).toBe('contended');
              contended += 1;
              if (first) answered += 1;
              first = false;
              // As the activity's retry would: after the answer's delay (at least 20 ms here).
              if (got.outcome === 'contended') await sleep(Math.max(20, got.retryAfterMs));
            }
          });
          const watcher = (async () => {
            while (!stop) {
              const waits = await lockWaiters(h.db.pool, app, 50);
              mostWaiting = Math.max(mostWaiting, new Set(waits.map((w) => w.pid)).size);
              await sleep(25);
            }
          })();
          // Once every caller has had its first answer: the steady state, not their start.
          while (answered < 80) await sleep(10);
          await unrelated(50);
          stop = true;
          await Promise.all([...callers, watcher]);
        }
        console.log('80 callers of a busy resource, a pool of 10', { mostWaiting, contended });
        expect(mostWaiting).toBeLessThanOrEqual(1);
        expect(contended).toBeGreaterThan(80);
      } finally {
        await holder.end();
        await pool.end();
      }
    }, 120_000);
  });
});
