/**
 * A transactional effect under the plugin's `effects: 'all'` breaker, on PgStore and the dev
 * server: it is never uncertain, so no breaker counts it, and an open breaker of its name stops it
 * not. A plain effect beside it, on the same worker and an open breaker, is paused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSideEffectActivities, defineEffect } from '../../src/activities/index.js';
import { SideEffectFailureType } from '../../src/protocol/failures.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import type { SideEffectOutcome } from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { type Harness, startHarness, waitFor } from './harness.js';

describe("a transactional effect under breaker effects: 'all'", () => {
  let db: FreshSchema;
  let store: PgStore;
  let h: Harness;
  let plainApplies = 0;

  beforeAll(async () => {
    db = await freshSchema('tx_breaker');
    await migrate(db.pool, { schema: db.schema });
    await db.pool.query('create table ledger (key text primary key, fence bigint not null)');
    store = new PgStore({ pool: db.pool, schema: db.schema });
    h = await startHarness('tx_breaker', {
      store,
      ttlMs: 3_000,
      breaker: { effects: 'all', closedCacheMs: 0 },
      effects: {
        txDeposit: defineEffect({
          transactional: true,
          resource: (input: { account: string }) => `account:${input.account}`,
          apply: async (_input: { account: string }, { tx, key, fence }) => {
            await tx.query('insert into ledger (key, fence) values ($1, $2)', [key, fence]);
            return 'deposited';
          },
        }),
        plainCharge: defineEffect({
          resource: (input: { card: string }) => `card:${input.card}`,
          apply: async () => {
            plainApplies += 1;
            return 'charged';
          },
        }),
      },
    });
  }, 60_000);

  afterAll(async () => {
    await h?.close();
    await db?.drop();
  });

  it('gets no breaker: it applies while a breaker of its name is open; a plain effect beside it is paused', async () => {
    for (const group of ['txDeposit', 'plainCharge'])
      await store.setBreaker(group, { state: 'open', reason: 'maintenance', by: 'test' });

    const deposit = await h.start('guarded', ['txDeposit', { account: 'a1' }]);
    const outcome = (await deposit.result()) as SideEffectOutcome<string>;
    expect(outcome).toMatchObject({ outcome: 'applied', result: 'deposited' });
    const { rows } = await db.pool.query<{ key: string }>('select key from ledger');
    expect(rows.map((row) => row.key)).toEqual([outcome.key]);
    // Nothing asked or told the breaker: its only transition is the person's open.
    expect((await store.breakerEvents('txDeposit')).map(({ to, by }) => `${to} by ${by}`)).toEqual([
      'open by test',
    ]);

    // One attempt per activity call, so each refusal reaches the history as the caller's pause.
    const charge = await h.start('guarded', [
      'plainCharge',
      { card: 'c1' },
      { retry: { maximumAttempts: 1 } },
    ]);
    const pausedFailure = await waitFor(async () => {
      const { events } = await charge.fetchHistory();
      return events?.find(
        (event) =>
          event.activityTaskFailedEventAttributes?.failure?.applicationFailureInfo?.type ===
          SideEffectFailureType.Paused,
      );
    }, 'the plain effect paused by its open breaker');
    expect(pausedFailure).toBeDefined();
    expect(plainApplies).toBe(0);
    expect(await h.replayAll()).toEqual([]);
  });

  it('declaring a breaker is refused where the effect is made, and at worker start', () => {
    const declared = {
      transactional: true,
      breaker: { group: 'bank' },
      resource: () => 'r',
      apply: async () => null,
    } as never;
    expect(() => defineEffect(declared)).toThrow(
      expect.objectContaining({ code: 'INVALID_ACTION', field: 'breaker' }),
    );
    expect(() =>
      createSideEffectActivities({
        store,
        ttlMs: 3_000,
        client: h.client,
        taskQueue: h.taskQueue,
        effects: { txDeposit: declared },
      }),
    ).toThrow(
      expect.objectContaining({ code: 'INVALID_ACTION', field: 'effects.txDeposit.breaker' }),
    );
  });
});
