/**
 * `sideeffect resolve` whose Update is recorded by the ReconcileWorkflow just as `--wait` runs
 * out: the person's own verdict stands, so the CLI must say it was recorded (exit 0), not that
 * somebody else's verdict stood and theirs was dropped.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveKey } from '../../src/cli/commands/resolve/deliver.js';
import { Runner } from '../../src/core/index.js';
import type { Resolution } from '../../src/core/verdict.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { ReconcileWorkflow, reconcileWorkflowId } from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { type Harness, startHarness } from '../temporal/harness.js';

const WAIT_MS = 1_500;

/** A real PgStore whose verdicts are answered late: recorded at once, the answer held past the CLI's wait. */
class LateAnsweringStore extends PgStore {
  override async resolveUncertain(key: string, resolution: Resolution) {
    const outcome = await super.resolveUncertain(key, resolution);
    await sleep(WAIT_MS * 2);
    return outcome;
  }
}

let db: FreshSchema;
let store: PgStore;
let harness: Harness;

beforeAll(async () => {
  db = await freshSchema('cli_late');
  await migrate(db.pool, { schema: db.schema });
  store = new PgStore({ pool: db.pool, schema: db.schema });
  harness = await startHarness('cli-late', {
    store: new LateAnsweringStore({ pool: db.pool, schema: db.schema }),
    effects: {},
    ttlMs: 30_000,
  });
});

afterAll(async () => {
  await harness?.close();
  await db?.drop();
});

describe('resolve whose Update lands as --wait runs out', () => {
  it('reports the verdict as recorded through the ReconcileWorkflow', async () => {
    const action = { key: 'order-late/charge', resource: 'card-late' };
    const execution = await new Runner(store, { ttlMs: 30_000 }).execute(action, async () => {
      throw new Error('gateway timeout after the charge was sent');
    });
    expect(execution.outcome).toBe('uncertain');
    await harness.client.workflow.start(ReconcileWorkflow, {
      taskQueue: harness.taskQueue,
      workflowId: reconcileWorkflowId(action.key),
      args: [{ ...action, reason: 'gateway timeout' }],
    });
    await harness.waitForReconcile(action.key, 'waiting');

    const report = await resolveKey({
      store,
      client: harness.client,
      key: action.key,
      // The first attempt on a fresh resource: fence 1, the attempt ann checked.
      input: { applied: false, reason: 'not in the bank', by: 'ann', fence: 1 },
      waitMs: WAIT_MS,
    });

    expect(report).toMatchObject({ won: true, via: 'workflow', applied: false });
    expect(report.message).toMatch(/^resolved: not applied/);
    expect(report.message).toMatch(/as the wait ran out/);
    const events = await store.events(action.key);
    expect(events.filter((e) => e.from === 'uncertain')).toEqual([
      expect.objectContaining({ to: 'free', by: 'ann', reason: 'not in the bank' }),
    ]);
    // The CLI's recheck signal may end it on the store's copy of the same verdict first.
    expect(await harness.reconcile(action.key).result()).toMatchObject({ applied: false });
  });
});
