/**
 * A transactional effect as a Temporal activity, on PgStore and the dev server: its ledger insert
 * commits with the key's completion, a replay never runs it again, and an attempt that fails after
 * its insert is rolled back and retried by Temporal into exactly one row, never an uncertain key.
 */
import { WorkflowFailedError } from '@temporalio/client';
import { type ActivityFailure, ApplicationFailure } from '@temporalio/common';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSideEffectActivities, defineEffect } from '../../src/activities/index.js';
import { SideEffectFailureType } from '../../src/protocol/failures.js';
import { MemoryStore } from '../../src/store/memory.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import type { SideEffectOutcome } from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { type Harness, startHarness } from './harness.js';

const isolationOf = async (tx: pg.PoolClient): Promise<string> =>
  (
    await tx.query<{ level: string }>(
      `select pg_catalog.current_setting('transaction_isolation') as level`,
    )
  ).rows[0]!.level;

interface Deposit {
  account: string;
  amount: number;
  /** Attempts that throw after their insert, before the effect returns. */
  failFirst?: number;
}

describe('transactional effect activity', () => {
  let db: FreshSchema;
  let h: Harness;
  const attempts = new Map<string, number>();

  beforeAll(async () => {
    db = await freshSchema('tx_activity');
    await migrate(db.pool, { schema: db.schema });
    await db.pool.query(
      'create table ledger (id serial primary key, key text not null unique, amount int not null, fence bigint not null)',
    );
    const store = new PgStore({ pool: db.pool, schema: db.schema });
    h = await startHarness('tx_activity', {
      store,
      ttlMs: 3_000,
      effects: {
        txDeposit: defineEffect({
          transactional: true,
          resource: (input: Deposit) => `account:${input.account}`,
          apply: async (input: Deposit, { tx, key, fence }) => {
            const { rows } = await tx.query<{ id: number }>(
              'insert into ledger (key, amount, fence) values ($1, $2, $3) returning id',
              [key, input.amount, fence],
            );
            const attempt = (attempts.get(key) ?? 0) + 1;
            attempts.set(key, attempt);
            if (attempt <= (input.failFirst ?? 0)) throw new Error(`attempt ${attempt} fails`);
            return { entry: rows[0]!.id, attempt };
          },
        }),
        // Ends the store's transaction (the error caught), then writes; behaves from attempt 4 on.
        txMisuse: defineEffect({
          transactional: true,
          resource: (input: { account: string; end: string }) => `account:${input.account}`,
          apply: async (input: { account: string; end: string }, { tx, key, fence }) => {
            const attempt = (attempts.get(input.account) ?? 0) + 1;
            attempts.set(input.account, attempt);
            if (attempt <= 3) await tx.query(input.end).catch(() => {});
            await tx.query('insert into ledger (key, amount, fence) values ($1, $2, $3)', [
              `${key}#${attempt}`,
              attempt,
              fence,
            ]);
            return attempt;
          },
        }),
        txSerializable: defineEffect({
          transactional: true,
          isolation: 'serializable',
          resource: (input: { account: string }) => `account:${input.account}`,
          apply: async (_input, { tx }) => isolationOf(tx),
        }),
        txDefault: defineEffect({
          transactional: true,
          resource: (input: { account: string }) => `account:${input.account}`,
          apply: async (_input, { tx }) => isolationOf(tx),
        }),
      },
    });
  });
  afterAll(async () => {
    await h?.close();
    await db?.drop();
  });

  const ledger = async (key: string) =>
    (await db.pool.query('select amount from ledger where key = $1', [key])).rows;

  it('applies once in the store transaction and replays the second call', async () => {
    const handle = await h.start('guardedTwice', ['txDeposit', { account: 'a', amount: 5 }]);
    const [first, second] = (await handle.result()) as SideEffectOutcome<{ entry: number }>[];
    expect(first!.outcome).toBe('applied');
    expect(second!.outcome).toBe('replayed');
    expect(second!.result).toEqual(first!.result);
    expect(await ledger(first!.key)).toEqual([{ amount: 5 }]);
    const store = new PgStore({ pool: db.pool, schema: db.schema });
    expect(await store.inspect(first!.key)).toMatchObject({ state: 'done' });
  });

  it('an attempt failing after its insert rolls back; the Temporal retry applies exactly once', async () => {
    const handle = await h.start('guarded', [
      'txDeposit',
      { account: 'b', amount: 7, failFirst: 2 },
      { retry: { initialInterval: '50 milliseconds', backoffCoefficient: 1 } },
    ]);
    const outcome = (await handle.result()) as SideEffectOutcome<{ attempt: number }>;
    expect(outcome.outcome).toBe('applied');
    expect(outcome.result.attempt).toBe(3);
    expect(await ledger(outcome.key)).toEqual([{ amount: 7 }]);
    const store = new PgStore({ pool: db.pool, schema: db.schema });
    expect((await store.events(outcome.key)).map((e) => `${e.from}->${e.to}`)).toEqual([
      'free->done',
    ]);
    expect(await h.replayAll()).toEqual([]);
  });

  it('work that ends the store transaction fails at once, non-retryable (SideEffectTransactionMisuse): no row per attempt', async () => {
    for (const end of ['commit', 'commit and chain', 'rollback', 'abort']) {
      const account = `misuse-${end.replaceAll(' ', '-')}`;
      const handle = await h.start('guarded', [
        'txMisuse',
        { account, end },
        { retry: { initialInterval: '50 milliseconds', backoffCoefficient: 1 } },
      ]);
      const error = await handle.result().catch((e: unknown) => e);
      expect(error, end).toBeInstanceOf(WorkflowFailedError);
      const failure = ((error as WorkflowFailedError).cause as ActivityFailure)
        .cause as ApplicationFailure;
      expect(failure).toBeInstanceOf(ApplicationFailure);
      expect(failure.type, end).toBe(SideEffectFailureType.TransactionMisuse);
      expect(failure.nonRetryable).toBe(true);
      expect(attempts.get(account), end).toBe(1);
      const rows = await db.pool.query('select 1 from ledger where amount <= 3 and key like $1', [
        `${handle.workflowId}/%`,
      ]);
      expect(rows.rowCount, end).toBe(0);
    }
  });

  it("runs apply at the effect's declared isolation, read committed by default", async () => {
    for (const [effect, level] of [
      ['txSerializable', 'serializable'],
      ['txDefault', 'read committed'],
    ] as const) {
      const handle = await h.start('guarded', [effect, { account: `iso-${effect}` }]);
      const outcome = (await handle.result()) as SideEffectOutcome<string>;
      expect(outcome).toMatchObject({ outcome: 'applied', result: level });
    }
  });

  it('an isolation level Postgres does not have is refused at creation', () => {
    expect(() =>
      createSideEffectActivities({
        store: new PgStore({ pool: db.pool, schema: db.schema }),
        ttlMs: 3_000,
        client: h.client,
        taskQueue: h.taskQueue,
        effects: {
          txDeposit: defineEffect({
            transactional: true,
            // A JavaScript caller or a config file can send any string.
            isolation: 'snapshot' as never,
            resource: () => 'r',
            apply: async () => null,
          }),
        },
      }),
    ).toThrow(
      expect.objectContaining({
        code: 'INVALID_ACTION',
        message: expect.stringContaining('isolation'),
      }),
    );
  });

  it('a worker whose store cannot run transactions is refused at creation', () => {
    expect(() =>
      createSideEffectActivities({
        store: new MemoryStore(),
        ttlMs: 3_000,
        client: h.client,
        taskQueue: h.taskQueue,
        effects: {
          txDeposit: defineEffect({
            transactional: true,
            resource: () => 'r',
            apply: async (_input: unknown, { tx }: { tx: pg.PoolClient }) => tx.query('select 1'),
          }),
        },
      }),
    ).toThrow(expect.objectContaining({ code: 'NOT_TRANSACTIONAL' }));
  });
});
