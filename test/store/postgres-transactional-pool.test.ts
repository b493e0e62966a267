/**
 * Transactional effects and the pool (issue 39): no store call waits for a second connection
 * while it holds one, so a burst of failing effects on a full pool never wedges the store; the
 * wait for a connection is bounded; the TTL deadline fires with every pool connection held; a
 * holder the server ended is a definite failure.
 */
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  type Execution,
  KeyConflictError,
  Runner,
  StoreUnavailableError,
  type TransactionContext,
} from '../../src/core/index.js';
import { PgStore } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

const TTL = 10_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('PgStore transactional effects on a full pool', () => {
  let h: PgHarness;
  const pools: pg.Pool[] = [];
  beforeEach(async () => {
    h = await pgHarness('pg_tx_pool', { movableClock: false });
    await h.db.pool.query('create table ledger (key text not null, fence bigint not null)');
  });
  afterEach(async () => {
    await Promise.all(pools.splice(0).map((pool) => pool.end()));
    await h.close();
  });

  /** A store on a pool of its own, at most `max` connections. */
  const storeOn = (max: number, options: { connectWaitMs?: number } = {}) => {
    const pool = new pg.Pool({ ...h.db.config, max });
    pool.on('error', () => {});
    pools.push(pool);
    return { pool, store: new PgStore({ pool, schema: h.db.schema, ...options }) };
  };
  const insert =
    (key: string) =>
    async ({ tx, fence }: TransactionContext<pg.PoolClient>) => {
      await tx.query('insert into ledger (key, fence) values ($1, $2)', [key, fence]);
      return { payload: bytes(`fence ${fence}`) };
    };
  const throwing =
    (key: string) =>
    async (context: TransactionContext<pg.PoolClient>): Promise<never> => {
      await insert(key)(context);
      throw new Error(`work of ${key} failed`);
    };

  it('pool max 1: a throwing effect, then one whose key is bound to another resource, answer', async () => {
    const { store } = storeOn(1);
    const runner = new Runner(store, { ttlMs: TTL });
    const failed = await runner.executeInTransaction(
      { key: 'one-throw', resource: 'r-one' },
      throwing('one-throw'),
    );
    expect(failed).toMatchObject({
      outcome: 'failed',
      error: { message: 'work of one-throw failed' },
    });
    await runner.executeInTransaction({ key: 'bound', resource: 'r-a' }, insert('bound'));
    const misKeyed = await runner
      .executeInTransaction({ key: 'bound', resource: 'r-b' }, insert('bound'))
      .catch((error: unknown) => error);
    expect(misKeyed).toBeInstanceOf(KeyConflictError);
    expect(misKeyed).toMatchObject({ field: 'resource' });
  }, 60_000);

  it('pool max N, 10N concurrent calls: throwing, mis-keyed and committing effects, plain effects and the sweeper all answer', async () => {
    const N = 3;
    const { pool, store } = storeOn(N);
    const runner = new Runner(store, { ttlMs: TTL });
    // Keys bound to another resource than the one they are asked with.
    for (let i = 0; i < N; i++) {
      const a = { key: `bound-${i}`, resource: `home-${i}` };
      expect((await runner.executeInTransaction(a, insert(a.key))).outcome).toBe('applied');
    }
    const calls: Array<Promise<string>> = [];
    const answer = (what: Promise<Execution | unknown>) =>
      what.then(
        (x) => (x as Execution)?.outcome ?? 'answered',
        (error: unknown) => (error as { code?: string }).code ?? String(error),
      );
    for (let i = 0; i < 10 * N; i++) {
      const key = `burst-${i}`;
      const resource = `burst-r-${i % 7}`;
      switch (i % 5) {
        case 0:
        case 1:
          calls.push(answer(runner.executeInTransaction({ key, resource }, throwing(key))));
          break;
        case 2:
          calls.push(
            answer(
              runner.executeInTransaction(
                { key: `bound-${i % N}`, resource: `away-${i}` },
                insert(key),
              ),
            ),
          );
          break;
        case 3:
          calls.push(answer(runner.executeInTransaction({ key, resource }, insert(key))));
          break;
        case 4:
          calls.push(
            answer(
              runner.execute({ key, resource: `plain-${i}` }, async () => ({
                payload: bytes('p'),
              })),
            ),
          );
          calls.push(answer(store.sweep()));
          break;
      }
    }
    const answers = await Promise.all(calls);
    const count = (what: string) => answers.filter((a) => a === what).length;
    expect(count('failed')).toBe(2 * 2 * N);
    expect(count('KEY_CONFLICT')).toBe(2 * N);
    // Committing effects share 7 resources with throwing ones: applied, or contended at worst.
    expect(count('applied') + count('contended')).toBe(4 * N);
    expect(count('answered')).toBe(2 * N);
    expect(answers.filter((a) => a === 'STORE_UNAVAILABLE')).toEqual([]);
    // Every connection back in the pool, none waited for.
    expect(pool.waitingCount).toBe(0);
    expect(pool.idleCount).toBe(pool.totalCount);
  }, 120_000);

  it("a call that waits for a pool connection past connectWaitMs throws StoreUnavailableError, and the pool's connection comes back", async () => {
    const { pool, store } = storeOn(1, { connectWaitMs: 200 });
    const held = await pool.connect();
    const waited = await store
      .acquire({ key: 'starved', resource: 'r-starved' }, TTL)
      .catch((error: unknown) => error);
    expect(waited).toBeInstanceOf(StoreUnavailableError);
    expect(String((waited as Error).message)).toMatch(/no connection of the pool within 200 ms/);
    const tx = await new Runner(store, { ttlMs: TTL })
      .executeInTransaction({ key: 'starved-tx', resource: 'r-starved' }, insert('starved-tx'))
      .catch((error: unknown) => error);
    expect(tx).toBeInstanceOf(StoreUnavailableError);
    held.release();
    // The waits given up left nothing behind: the next call gets the connection.
    const granted = await store.acquire({ key: 'starved', resource: 'r-starved' }, TTL);
    expect(granted.outcome).toBe('granted');
    expect(() => new PgStore({ pool, schema: h.db.schema, connectWaitMs: 0 })).toThrow(
      /connectWaitMs/,
    );
  }, 60_000);

  it('the TTL deadline ends holders that took their cuts away while they hold every pool connection', async () => {
    const N = 2;
    const { store } = storeOn(N);
    const ttlMs = 500;
    const runner = new Runner(store, { ttlMs });
    const stalled = Array.from({ length: N }, (_, i) =>
      runner
        .executeInTransaction(
          { key: `stall-${i}`, resource: `stall-r-${i}` },
          async (context: TransactionContext<pg.PoolClient>) => {
            await context.tx.query(
              'set local statement_timeout = 0; set local idle_in_transaction_session_timeout = 0',
            );
            await insert(`stall-${i}`)(context);
            await context.tx.query('select pg_sleep(8)');
            return { payload: bytes('late') };
          },
        )
        .then(
          (x) => x.outcome,
          (error: unknown) => (error as { code?: string }).code ?? String(error),
        ),
    );
    const outcomes = await Promise.all(stalled);
    expect(outcomes.filter((o) => o === 'applied')).toEqual([]);
    const { rows } = await h.db.pool.query('select key from ledger');
    expect(rows).toEqual([]);
    for (let i = 0; i < N; i++) expect(await store.inspect(`stall-${i}`)).toBeUndefined();
  }, 60_000);

  it('a frozen holder the server ended is a definite failure, not "may have committed"', async () => {
    const { store } = storeOn(2);
    const ttlMs = 400;
    const runner = new Runner(store, { ttlMs });
    const execution = await runner.executeInTransaction(
      { key: 'frozen', resource: 'r-frozen' },
      async (context: TransactionContext<pg.PoolClient>) => {
        await insert('frozen')(context);
        // Idle in its transaction past the TTL: Postgres ends the backend.
        await sleep(4 * ttlMs);
        return { payload: bytes('late') };
      },
    );
    expect(execution.outcome).toBe('failed');
    if (execution.outcome !== 'failed') return;
    expect(execution.error).toBeInstanceOf(StoreUnavailableError);
    expect(String(execution.error)).toMatch(/rolled back, nothing recorded/);
    expect(await store.inspect('frozen')).toBeUndefined();
    const retried = await runner.executeInTransaction(
      { key: 'frozen', resource: 'r-frozen' },
      insert('frozen'),
    );
    expect(retried.outcome).toBe('applied');
  }, 60_000);
});
