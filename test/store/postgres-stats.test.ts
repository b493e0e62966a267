/**
 * `sideeffect stats` reads the event log: an uncertain attempt is the event that entered
 * `uncertain` and the one that left it. Notes on a key that stays uncertain (a pending verdict,
 * one a worker refused, one withdrawn) are neither: counted, 8 attempts read 11 and one person's
 * verdicts were listed twice under the same BY/KIND/VERDICT.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { migrate, PgStore, storeStats } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';

let db: FreshSchema;
beforeAll(async () => {
  db = await freshSchema('pg_stats');
  await migrate(db.pool, { schema: db.schema });
});
afterAll(() => db?.drop());

it('counts each uncertain attempt once and each verdict once, whatever was noted between', async () => {
  const store = new PgStore({ pool: db.pool, schema: db.schema });
  const uncertain = async (key: string) => {
    const action = { key, resource: `r-${key}` };
    const granted = await store.acquire(action, 10_000, { applying: true });
    if (granted.outcome !== 'granted') throw new Error(granted.outcome);
    await store.markUncertain(action, granted.lease, 'lost');
  };
  for (const key of ['a', 'b', 'c']) await uncertain(key);
  // Notes that leave the key uncertain: pending verdicts, a refusal, a withdrawal.
  const first = await store.addPendingVerdict('a', { applied: false, reason: 'x', by: 'bob' });
  const second = await store.addPendingVerdict('a', { applied: false, reason: 'y', by: 'bob' });
  if (first.outcome !== 'held' || second.outcome !== 'held') throw new Error('not pending');
  await store.judgeVerdict(first.verdict.id, { accept: false, why: 'no' });
  await store.withdrawPendingVerdict('a', second.verdict.id, { reason: 'wrong', by: 'carol' });
  await store.resolveUncertain('a', { applied: false, reason: 'checked', by: 'carol' });
  await store.resolveUncertain('b', { applied: false, reason: 'checked', by: 'carol' });
  await store.resolveUncertain('c', {
    applied: true,
    result: { payload: bytes('1') },
    reason: 'checked',
    by: 'carol',
  });
  // `a` applies again and is uncertain again: a fourth attempt.
  await uncertain('a');

  const stats = await storeStats(db.pool, { schema: db.schema });
  expect(stats.uncertainAttempts).toBe(4);
  expect(stats.backlog.count).toBe(1);
  expect(
    stats.resolutions.map(({ by, kind, verdict, count }) => ({ by, kind, verdict, count })),
  ).toEqual(
    expect.arrayContaining([
      { by: 'carol', kind: 'person', verdict: 'not_applied', count: 2 },
      { by: 'carol', kind: 'person', verdict: 'applied', count: 1 },
    ]),
  );
  expect(stats.resolutions).toHaveLength(2);
  expect(stats.timeToResolution.count).toBe(3);
});
