/**
 * The store never calls `client.query()` on a client that already has a query waiting (issue
 * 47): pg 8 warns (DeprecationWarning) and pg 9 removes the queue. A pool owner who runs a
 * statement on each new connection (`pool.on('connect', ...)`, pg's documented way to set a
 * session value) leaves one waiting when pg-pool hands the connection over, and the store's
 * first statement on it was queued behind it. Each path of the store runs here on fresh
 * connections of such a pool: plain calls, transactional effects that apply, fail, refuse an
 * ending statement and meet a full pool, and the TTL deadline. A warning heard fails the file.
 * pg warns once per process: this file runs in a process of its own, before any other statement.
 */
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Runner, type TransactionContext } from '../../src/core/index.js';
import { PgStore } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

const TTL = 10_000;

/** pg's warning for a query sent while another waits in the client's queue. */
const QUEUED = /already executing a query/;

const heard: string[] = [];
const listen = (warning: Error): void => {
  if (QUEUED.test(warning.message)) heard.push(warning.stack ?? warning.message);
};

describe('the store sends no query behind one already waiting on its client', () => {
  let h: PgHarness;
  const pools: pg.Pool[] = [];
  beforeAll(() => {
    process.on('warning', listen);
  });
  afterAll(() => {
    process.off('warning', listen);
  });
  beforeEach(async () => {
    h = await pgHarness('pg_query_queue', { movableClock: false });
    await h.db.pool.query('create table ledger (key text not null, fence bigint not null)');
  });
  afterEach(async () => {
    await Promise.all(pools.splice(0).map((pool) => pool.end()));
    await h.close();
    // A warning is emitted on the next tick: let it arrive before judging.
    await new Promise((resolve) => setImmediate(resolve));
    expect(heard.splice(0)).toEqual([]);
  });

  /** A store on a pool whose owner sets a session value on every new connection. */
  const storeOn = (max: number, options: { idleTimeoutMillis?: number } = {}) => {
    const pool = new pg.Pool({ ...h.db.config, max, ...options });
    pool.on('error', () => {});
    pool.on('connect', (client) => {
      client.query(`set application_name = 'query-queue'`).catch(() => {});
    });
    pools.push(pool);
    return new PgStore({ pool, schema: h.db.schema });
  };
  const insert =
    (key: string) =>
    async ({ tx, fence }: TransactionContext<pg.PoolClient>) => {
      await tx.query(`insert into "${h.db.schema}".ledger (key, fence) values ($1, $2)`, [
        key,
        fence,
      ]);
      return { payload: bytes(`fence ${fence}`) };
    };

  it('plain calls, each on a new connection', async () => {
    // Connections closed once idle: each call below opens a new one.
    const store = storeOn(1, { idleTimeoutMillis: 1 });
    const runner = new Runner(store, { ttlMs: TTL });
    const idle = () => new Promise((resolve) => setTimeout(resolve, 50));
    const done = await runner.execute({ key: 'p1', resource: 'r' }, async () => ({
      payload: bytes('p'),
    }));
    expect(done).toMatchObject({ outcome: 'applied' });
    await idle();
    expect(await store.inspect('p1')).toMatchObject({ state: 'done' });
    await idle();
    expect((await store.acquire({ key: 'p2', resource: 'r2' }, TTL)).outcome).toBe('granted');
  });

  it('transactional effects that apply, fail, end their transaction and meet a full pool', async () => {
    const store = storeOn(2, { idleTimeoutMillis: 1 });
    const runner = new Runner(store, { ttlMs: TTL });
    const outcomes = await Promise.all([
      runner.executeInTransaction<pg.PoolClient>({ key: 't1', resource: 'tr1' }, insert('t1')),
      runner.executeInTransaction<pg.PoolClient>(
        { key: 't2', resource: 'tr2' },
        async (context) => {
          await insert('t2')(context);
          throw new Error('work failed');
        },
      ),
      runner.executeInTransaction<pg.PoolClient>(
        { key: 't3', resource: 'tr3' },
        async (context) => {
          await context.tx.query('commit').catch(() => {});
          return { payload: bytes('refused') };
        },
      ),
      runner.executeInTransaction<pg.PoolClient>(
        { key: 't4', resource: 'tr4' },
        async (context) => {
          await context.tx.query(`prepare t4 as select 1`);
          await context.tx.query(`deallocate t4`);
          return insert('t4')(context);
        },
      ),
    ]);
    expect(outcomes.map((o) => o.outcome)).toEqual(['applied', 'failed', 'failed', 'applied']);
  });

  it('the TTL deadline ends a holder that took its cuts away', async () => {
    const store = storeOn(1);
    const ttlMs = 300;
    const outcome = await new Runner(store, { ttlMs })
      .executeInTransaction<pg.PoolClient>({ key: 'stall', resource: 'stall' }, async (context) => {
        await context.tx.query(
          'set local statement_timeout = 0; set local idle_in_transaction_session_timeout = 0',
        );
        await context.tx.query('select pg_sleep(5)');
        return { payload: bytes('late') };
      })
      .then(
        (x) => x.outcome,
        (error: unknown) => (error as { code?: string }).code,
      );
    expect(outcome).not.toBe('applied');
  });
});
