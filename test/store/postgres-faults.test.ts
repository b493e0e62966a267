/**
 * Faults: a connection killed mid-operation, a write killed inside the sink's transaction, and
 * Postgres unreachable. Each must end as a thrown StoreUnavailableError (never a false outcome),
 * and a complete that fails must leave the key `uncertain` through the Runner.
 *
 * To kill an operation mid-flight we make it wait: a second session holds the resource row's lock,
 * the operation blocks inside its plpgsql function, and we pg_terminate_backend it from there.
 */
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Action,
  isNotApplied,
  OutcomeUncertainError,
  Runner,
  type Store,
  StoreUnavailableError,
} from '../../src/core/index.js';
import { PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type PgHarness, pgHarness, sidePool } from './pg-support/harness.js';

const TTL = 10_000;
let seq = 0;
const action = (): Action => {
  seq += 1;
  return { key: `fault-${seq}`, resource: `fault-res-${seq}` };
};

let h: PgHarness;
let side: pg.Pool;
beforeAll(async () => {
  h = await pgHarness('pg_faults', { movableClock: false });
  side = sidePool(h.db);
  await h.db.pool.query('create table ledger (resource text, fence bigint)');
});
afterAll(async () => {
  await side?.end();
  await h?.close();
});

/** Holds the resource row's lock in a second session until the returned release is called. */
async function lockResource(resource: string): Promise<() => Promise<void>> {
  const blocker = await side.connect();
  await blocker.query('begin');
  await blocker.query('select from resources where resource = $1 for update', [resource]);
  return async () => {
    await blocker.query('commit');
    blocker.release();
  };
}

/**
 * Waits until a backend of this schema runs the statement that begins with `start` and sits
 * waiting on a lock, then kills it. Matched by its beginning: pg_stat_activity keeps only the
 * first 1 KiB of a statement. Only a wait of 50 ms or more: an acquire's first look at a held row
 * waits 5 ms (FIRST_LOOK) and is then asked again with the full wait, and a kill that landed
 * as the first look gave up hit an idle connection, not the call (seen once in CI).
 */
async function killWhenWaiting(start: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await side.query<{ pid: number }>(
      `select pid from pg_stat_activity
        where wait_event_type = 'Lock' and query like $1 and query like $2
          and pid <> pg_backend_pid()
          and pg_catalog.clock_timestamp() - query_start > interval '50 milliseconds'`,
      [`${start}%`, `%"${h.db.schema}".%`],
    );
    if (rows[0]) {
      await side.query('select pg_terminate_backend($1)', [rows[0].pid]);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`no backend waited in the statement ${start}...`);
}

async function grantAndRelease(store: Store, a: Action): Promise<void> {
  const acq = await store.acquire(a, TTL);
  if (acq.outcome !== 'granted') throw new Error(acq.outcome);
  await store.release(a, acq.lease);
}

describe('a connection killed mid-operation', () => {
  it('acquire throws StoreUnavailableError and writes nothing', async () => {
    const setup = action();
    await grantAndRelease(h.store, setup);
    const unlock = await lockResource(setup.resource);
    const a = { ...action(), resource: setup.resource };
    // Settled into a value at once: the kill can reject it before killWhenWaiting returns, and a
    // rejection with no handler yet is reported as unhandled.
    const failure = h.store.acquire(a, TTL).then(
      () => undefined,
      (error: unknown) => error,
    );
    try {
      await killWhenWaiting('select h.result as o_result');
      expect(await failure).toBeInstanceOf(StoreUnavailableError);
    } finally {
      await unlock();
    }
    expect(await h.store.inspect(a.key)).toBeUndefined();
    // The store still works on the pool's other connections.
    expect((await h.store.acquire(a, TTL)).outcome).toBe('granted');
  });

  it('a killed complete ends uncertain through the Runner, with the cause attached', async () => {
    const a = action();
    const runner = new Runner(h.store, { ttlMs: TTL });
    let unlock: (() => Promise<void>) | undefined;
    let killed: Promise<void> | undefined;
    const execution = await runner.execute(a, async () => {
      unlock = await lockResource(a.resource);
      // complete blocks on the lock and is killed; the Runner's markUncertain then waits for
      // the same lock, which is let go once the kill is done.
      killed = killWhenWaiting('select%complete_held(').then(() => unlock!());
      return { payload: bytes('charged') };
    });
    await killed;
    expect(execution.outcome).toBe('uncertain');
    if (execution.outcome !== 'uncertain') return;
    expect(execution.error).toBeInstanceOf(OutcomeUncertainError);
    expect(execution.error.cause).toBeInstanceOf(StoreUnavailableError);
    expect(execution.reason).toMatch(/^complete failed: store complete failed/);
    const record = await h.store.inspect(a.key);
    expect(record?.state).toBe('uncertain');
    expect((await h.store.acquire(a, TTL)).outcome).toBe('uncertain');
  });

  it('a write killed inside writeFenced throws StoreUnavailableError; nothing lands', async () => {
    const resource = `sink-kill-${seq++}`;
    // Issued as the schema's store would (the sink refuses a fence its store never issued).
    await h.db.pool.query('insert into resources (resource, fence) values ($1, 1)', [resource]);
    const write = h.sink.writeFenced(resource, 1, async (tx) => {
      await tx.query('insert into ledger values ($1, 1)', [resource]);
      const pid = (tx as unknown as { processID: number }).processID;
      await side.query('select pg_terminate_backend($1)', [pid]);
      await tx.query('select 1');
    });
    const error = await write.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    // Lost before COMMIT was sent: the transaction cannot have committed.
    expect(isNotApplied(error)).toBe(true);
    const { rows } = await h.db.pool.query('select * from ledger where resource = $1', [resource]);
    expect(rows).toEqual([]);
    expect(await h.sink.highestFence(resource)).toBe(0);
  });

  it('a write that swallows a failed statement is not reported as written', async () => {
    const resource = `sink-swallow-${seq++}`;
    // Issued as the schema's store would (the sink refuses a fence its store never issued).
    await h.db.pool.query('insert into resources (resource, fence) values ($1, 1)', [resource]);
    const write = h.sink.writeFenced(resource, 1, async (tx) => {
      await tx.query('insert into ledger values ($1, 1)', [resource]);
      await tx.query('select 1/0').catch(() => {});
      return 'looks fine';
    });
    await expect(write).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(await h.sink.highestFence(resource)).toBe(0);
  });
});

describe('Postgres unreachable', () => {
  const nowhere = 'postgres://postgres@127.0.0.1:1/test';
  const store = new PgStore({ connectionString: nowhere });
  const sink = new PgFencedSink({ connectionString: nowhere });
  afterAll(async () => {
    await store.close();
    await sink.close();
  });
  const a: Action = { key: 'k', resource: 'r' };
  const lease = { resource: 'r', fence: 1, ttlMs: TTL, expiresAt: 0 };
  const calls: Array<[string, () => Promise<unknown>]> = [
    ['acquire', () => store.acquire(a, TTL)],
    ['renew', () => store.renew(a, lease, TTL)],
    ['complete', () => store.complete(a, lease, { payload: bytes('x') })],
    ['markUncertain', () => store.markUncertain(a, lease, 'lost')],
    ['release', () => store.release(a, lease)],
    ['resolveUncertain', () => store.resolveUncertain('k', { applied: false, reason: 'x' })],
    ['sweep', () => store.sweep()],
    ['inspect', () => store.inspect('k')],
    ['list', () => store.list()],
    ['events', () => store.events('k')],
    ['purge', () => store.purge({ olderThanMs: 1, force: true })],
    ['writeFenced', () => sink.writeFenced('r', 1, async () => 'x')],
    ['highestFence', () => sink.highestFence('r')],
  ];
  it.each(calls)('%s throws StoreUnavailableError with the cause', async (_name, call) => {
    const error = await call().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as Error).cause).toMatchObject({ code: 'ECONNREFUSED' });
  });

  it('the Runner reports a store it cannot reach as a thrown error, never an outcome', async () => {
    const runner = new Runner(store, { ttlMs: TTL });
    let applied = false;
    await expect(
      runner.execute(a, async () => {
        applied = true;
        return { payload: bytes('x') };
      }),
    ).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(applied).toBe(false);
  });
});
