/**
 * A wrong "not applied" verdict over a write that did land, on real Postgres (PgStore, and a
 * PgFencedSink over a table whose key is unique) and the dev server: the re-run hits the unique
 * key, the sink rolls it back, and the key is freed. It must not be retried for ever: after a
 * few attempts the key is uncertain again, with a reason that names the verdict, so a person
 * can correct it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { migrate, PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { resolve } from '../../src/testing/index.js';
import type { SideEffectOutcome } from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { type Harness, startHarness, waitFor } from './harness.js';

describe('a wrong "not applied" verdict', () => {
  let db: FreshSchema;
  let h: Harness;
  let store: PgStore;
  /** Keys whose first write committed and whose answer was then lost. */
  const lost = new Set<string>();

  beforeAll(async () => {
    db = await freshSchema('wrong_verdict');
    await migrate(db.pool, { schema: db.schema });
    await db.pool.query('create table charges (key text primary key, cents int not null)');
    store = new PgStore({ pool: db.pool, schema: db.schema });
    const sink = new PgFencedSink({ pool: db.pool, schema: db.schema });
    const charge = defineEffect({
      resource: (input: { card: string; cents: number }) => `card:${input.card}`,
      async apply(input: { card: string; cents: number }, { key, lease }) {
        await sink.writeFenced(lease.resource, lease.fence, (tx) =>
          tx.query('insert into charges (key, cents) values ($1, $2)', [key, input.cents]),
        );
        if (!lost.has(key)) {
          lost.add(key);
          throw new Error('connection reset after the charge');
        }
        return { charged: key };
      },
    });
    h = await startHarness('wrong-verdict', { store, effects: { charge }, ttlMs: 5_000 });
  });
  afterAll(async () => {
    await h?.close();
    await db?.drop();
  });

  it('hands the key back to a person after a few attempts that hit the unique key', async () => {
    const run = await h.start('guarded', [
      'charge',
      { card: 'c1', cents: 500 },
      { step: 'pay', retry: { initialInterval: '100 ms', backoffCoefficient: 1 } },
    ]);
    const key = `${run.workflowId}/pay`;
    await h.waitForReconcile(key, 'waiting');
    await resolve(h.client, key, {
      applied: false,
      reason: 'not in the bank export',
      by: 'ops@example.com',
    });

    // The re-runs fail on the row the first attempt wrote, until the key is uncertain again.
    const again = await waitFor(
      async () => {
        const record = await store.inspect(key);
        const events = await store.events(key);
        return record?.state === 'uncertain' && events.length > 3 ? record : undefined;
      },
      'the key to be uncertain again',
      30_000,
    );
    expect(again.reason).toMatch(
      /apply failed 3 times in a row without applying since the verdict "not applied" by ops@example\.com \(not in the bank export\), which may be wrong: .*duplicate key/,
    );
    const transitions = (await store.events(key)).map((event) => `${event.from}->${event.to}`);
    expect(transitions).toEqual([
      'free->applying',
      'applying->uncertain',
      'uncertain->free',
      'free->applying',
      'applying->free',
      'free->applying',
      'applying->free',
      'free->applying',
      'applying->uncertain',
    ]);
    const status = await h.waitForReconcile(key, 'waiting');
    expect(status.reason).toMatch(/verdict "not applied" by ops@example\.com/);

    // A person corrects it: the row is there.
    await resolve(h.client, key, {
      applied: true,
      result: { charged: key },
      reason: 'row found',
      by: 'ops@example.com',
    });
    expect((await run.result()) as SideEffectOutcome<unknown>).toMatchObject({
      outcome: 'reconciled',
      result: { charged: key },
    });
    const { rows } = await db.pool.query('select key from charges where key = $1', [key]);
    expect(rows).toHaveLength(1);
  });
});
