/**
 * How long a free resource's acquire waits when it arrives with 63 acquires of busy resources
 * (resources used before, each row now held by another transaction, as a transactional effect's
 * work holds it: one transaction holds all 63, so the bench needs one connection for them),
 * batching on against batching off, in one run: a shared statement must not make the free key wait for the busy ones (issue 39). Two
 * figures: the first call (the busy resources not yet known busy to the store) and the next one
 * (known busy: their callers wait alone). Fresh stores per round, rounds alternated.
 */
import pg from 'pg';
import { PgStore } from '../../src/store/postgres/index.js';
import { median } from './figures.js';

const BUSY = 63;
/** The pool the measured stores share: pg's default size, as a worker's is unless set. */
const POOL = 10;
const LOCK_WAIT_MS = 100;

export interface BusyLatencies {
  /** Free-key latency, ms, per round: first call and next call, batching on and off. */
  first: { on: number[]; off: number[] };
  next: { on: number[]; off: number[] };
}

export async function busyResourceLatencies(
  url: string,
  schema: string,
  rounds: number,
): Promise<BusyLatencies> {
  const pool = new pg.Pool({ connectionString: url, max: POOL });
  const holderPool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  holderPool.on('error', () => {});
  const setup = new PgStore({ pool: holderPool, schema, batching: false });
  const out: BusyLatencies = { first: { on: [], off: [] }, next: { on: [], off: [] } };
  try {
    for (let round = 0; round < rounds * 2; round++) {
      const batching = round % 2 === 0;
      const tag = `${round}-${Math.random().toString(36).slice(2, 8)}`;
      const busy = Array.from({ length: BUSY }, (_, i) => `busy-${tag}-${i}`);
      for (const resource of busy) {
        const used = await setup.acquire({ key: `used-${resource}`, resource }, 10_000);
        if (used.outcome !== 'granted') throw new Error(`setup: ${used.outcome}`);
        await setup.release({ key: `used-${resource}`, resource }, used.lease);
      }
      const holder = await holderPool.connect();
      await holder.query('begin');
      await holder.query(
        `select from "${schema}".resources where resource = any($1::text[]) for update`,
        [busy],
      );
      const store = new PgStore({
        pool,
        schema,
        lockWaitMs: LOCK_WAIT_MS,
        ...(batching ? {} : { batching: false }),
      });
      const wave = async (n: number): Promise<number> => {
        const busy = Array.from({ length: BUSY }, (_, i) =>
          store.acquire({ key: `busy-${tag}-${n}-${i}`, resource: `busy-${tag}-${i}` }, 10_000),
        );
        const started = performance.now();
        const free = await store.acquire(
          { key: `free-${tag}-${n}`, resource: `free-${tag}-${n}` },
          10_000,
        );
        const ms = performance.now() - started;
        if (free.outcome !== 'granted') throw new Error(`free key: ${free.outcome}`);
        await Promise.all(busy);
        return ms;
      };
      const side = batching ? 'on' : 'off';
      out.first[side].push(await wave(0));
      out.next[side].push(await wave(1));
      await holder.query('rollback');
      holder.release();
    }
  } finally {
    await pool.end();
    await holderPool.end();
  }
  return out;
}

/** The two figures' values: batched over unbatched medians. */
export function busyRatios(l: BusyLatencies): { first: number; next: number } {
  return {
    first: median(l.first.on) / median(l.first.off),
    next: median(l.next.on) / median(l.next.off),
  };
}
