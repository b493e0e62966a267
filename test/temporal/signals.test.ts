/**
 * Decisions people send (issue 22): the internal signals validate their input, a forged
 * `reconciled` decides nothing, and a verdict recorded in the store by any path ends the
 * ReconcileWorkflow. Against the dev server, through the real `temporal` CLI where a person would.
 */
import type { WorkflowHandle } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { encodeJson } from '../../src/core/index.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { reconciledSignal } from '../../src/protocol/wire.js';
import { MemoryStore } from '../../src/store/memory.js';
import { migrate, PgFencedSink } from '../../src/store/postgres/index.js';
import {
  recheckSignal,
  reconcileWorkflowId,
  resolveSignal,
  type SideEffectOutcome,
  statusQuery,
} from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { type Harness, Ledger, startHarness, temporalCli, waitFor } from './harness.js';

interface Order {
  account: string;
  amount: number;
}

const ledger = new Ledger();
const store = new MemoryStore();
const applies = new Map<string, number>();

let db: FreshSchema;
let sink: PgFencedSink;

const effects = {
  /** A new user's first charge: the downstream table was never created. */
  misconfigured: defineEffect({
    resource: (input: Order) => `account:${input.account}`,
    apply: (input: Order, { lease }) =>
      sink.writeFenced(lease.resource, lease.fence, (tx) =>
        tx.query(`insert into ${db.schema}.charges values ($1)`, [input.amount]),
      ),
  }),
  order: defineEffect({
    resource: (input: Order) => `account:${input.account}`,
    async apply(input: Order, { key, lease }) {
      const attempt = (applies.get(key) ?? 0) + 1;
      applies.set(key, attempt);
      const line = await ledger.write(lease.resource, lease.fence, key, input.amount);
      if (attempt === 1) throw new Error('connection reset after the write');
      return { receipt: `r-${line}` };
    },
  }),
};

const activity = { heartbeatTimeout: '10 seconds', startToCloseTimeout: '1 minute' };

/** How many times the workflow has scheduled the library's inspectKey activity (a store read). */
async function storeReads(handle: WorkflowHandle): Promise<number> {
  const history = await handle.fetchHistory();
  return (history.events ?? []).filter(
    (event) =>
      event.activityTaskCompletedEventAttributes &&
      (history.events ?? []).some(
        (scheduled) =>
          scheduled.eventId?.toString() ===
            event.activityTaskCompletedEventAttributes?.scheduledEventId?.toString() &&
          scheduled.activityTaskScheduledEventAttributes?.activityType?.name ===
            'sideeffect.inspectKey',
      ),
  ).length;
}

async function workflowTaskFailures(handle: WorkflowHandle): Promise<number> {
  const history = await handle.fetchHistory();
  return (history.events ?? []).filter((event) => event.workflowTaskFailedEventAttributes).length;
}

describe('decisions people send', () => {
  let h: Harness;
  beforeAll(async () => {
    db = await freshSchema('signals_sink');
    await migrate(db.pool, { schema: db.schema });
    // The store is a MemoryStore: no store issues fences in this database.
    sink = new PgFencedSink({ pool: db.pool, schema: db.schema, separateDatabase: true });
    h = await startHarness('signals', { store, effects, ttlMs: 5_000 });
  });
  afterAll(async () => {
    await h?.close();
    await db?.drop();
  });

  it('a write PgFencedSink rolled back before COMMIT (missing table) is "not applied": key free, retried with its own message, no reconcile, no page', async () => {
    const handle = await h.start('guarded', [
      'misconfigured',
      { account: 'p1', amount: 1 },
      activity,
    ]);
    const key = `${handle.workflowId}/misconfigured`;
    const retried = await waitFor(async () => {
      const pending = (await handle.describe()).raw.pendingActivities?.[0];
      return pending && (pending.attempt ?? 0) >= 2 ? pending : undefined;
    }, 'the effect to be retried after its rolled-back write');
    expect(retried.lastFailure?.message).toMatch(/relation ".*charges" does not exist/);
    expect((await store.inspect(key))?.state).toBe('free');
    await expect(h.reconcile(key).describe()).rejects.toThrow(/not found/i);
    await handle.terminate('the table is missing: nothing left to see');
  });

  it('a subscribe or reconciled signal with no input, sent with the temporal CLI, is refused; both workflows keep running and still resolve', async () => {
    const handle = await h.start('guarded', ['order', { account: 'm1', amount: 5 }, activity]);
    const key = `${handle.workflowId}/order`;
    await h.waitForReconcile(key, 'waiting');
    const reconcileId = reconcileWorkflowId(key);
    await temporalCli(['workflow', 'signal', '--workflow-id', reconcileId, '--name', 'subscribe']);
    await temporalCli([
      'workflow',
      'signal',
      '--workflow-id',
      reconcileId,
      '--name',
      'subscribe',
      '--input',
      '{"workflowId": 42}',
    ]);
    await temporalCli([
      'workflow',
      'signal',
      '--workflow-id',
      handle.workflowId,
      '--name',
      'reconciled',
    ]);
    const status = await waitFor(async () => {
      const s = await h.reconcile(key).query(statusQuery);
      return s.rejected.length === 2 ? s : undefined;
    }, 'both subscribe signals to be refused');
    expect(status.rejected.map((r) => r.signal)).toEqual(['subscribe', 'subscribe']);
    expect(status.rejected[0]?.error).toContain('expected one JSON object');
    expect(status.rejected[1]?.error).toContain('workflowId');
    expect(status.subscribers).toEqual([handle.workflowId]);

    await h.reconcile(key).signal(resolveSignal, {
      applied: true,
      result: { receipt: 'r-checked' },
      reason: 'found in the ledger',
      by: 'ops',
      fence: (await store.inspect(key))!.fence,
    });
    expect(await handle.result()).toEqual({
      outcome: 'reconciled',
      result: { receipt: 'r-checked' },
      key,
    });
    expect(applies.get(key)).toBe(1);
    expect(await workflowTaskFailures(handle)).toBe(0);
    expect(await workflowTaskFailures(h.reconcile(key))).toBe(0);
  });

  it('a forged reconciled signal changes nothing: the caller reads the store, keeps waiting, and returns what the store says', async () => {
    const handle = await h.start('guarded', ['order', { account: 'f1', amount: 8 }, activity]);
    const key = `${handle.workflowId}/order`;
    await h.waitForReconcile(key, 'waiting');
    await handle.signal(reconciledSignal, { key, applied: true, result: 'FORGED' });
    await waitFor(
      async () => ((await storeReads(handle)) >= 1 ? true : undefined),
      'the caller to read the key from the store',
    );
    expect((await handle.describe()).status.name).toBe('RUNNING');
    expect((await store.inspect(key))?.state).toBe('uncertain');

    await h.reconcile(key).signal(resolveSignal, {
      applied: true,
      result: { receipt: 'r-real' },
      reason: 'found in the ledger',
      by: 'ops',
      fence: (await store.inspect(key))!.fence,
    });
    const outcome = (await handle.result()) as SideEffectOutcome<unknown>;
    expect(outcome).toEqual({ outcome: 'reconciled', result: { receipt: 'r-real' }, key });
    expect(await storeReads(handle)).toBe(2);
  });

  it('a verdict recorded in the store only ends the ReconcileWorkflow on a recheck signal', async () => {
    const handle = await h.start('guarded', ['order', { account: 's1', amount: 2 }, activity]);
    const key = `${handle.workflowId}/order`;
    const { fence } = await h.waitForReconcile(key, 'waiting');
    await store.resolveUncertain(key, {
      applied: true,
      result: encodeJson({ receipt: 'r-store' }),
      reason: 'found by hand',
      by: 'dba',
      fence: fence!,
    });
    await h.reconcile(key).signal(recheckSignal);
    const resolution = (await h.reconcile(key).result()) as ReconcileResolution;
    expect(resolution).toMatchObject({
      key,
      applied: true,
      result: { receipt: 'r-store' },
      decidedBy: 'store',
    });
    expect(((await handle.result()) as SideEffectOutcome<unknown>).result).toEqual({
      receipt: 'r-store',
    });
  });

  it('a verdict recorded in the store only ends a ReconcileWorkflow at its next reminder', async () => {
    // onUncertain: throw leaves the key uncertain with no reconcile; start one reminding every second.
    const handle = await h.start('guarded', [
      'order',
      { account: 's2', amount: 2 },
      { ...activity, onUncertain: 'throw' },
    ]);
    await expect(handle.result()).rejects.toThrow();
    const key = `${handle.workflowId}/order`;
    const record = await store.inspect(key);
    expect(record?.state).toBe('uncertain');
    await h.client.workflow.start('ReconcileWorkflow', {
      taskQueue: h.taskQueue,
      workflowId: reconcileWorkflowId(key),
      args: [
        {
          key,
          resource: 'account:s2',
          reason: 'test',
          fence: record!.fence,
          remindEveryMs: 1_000,
          searchAttributes: false,
        },
      ],
    });
    await h.waitForReconcile(key, 'waiting');
    await store.resolveUncertain(key, { applied: false, reason: 'not there', by: 'dba' });
    expect(await h.reconcile(key).result()).toMatchObject({
      key,
      applied: false,
      decidedBy: 'store',
    });
  });

  it('the UI lists subscribe and reconciled as internal', async () => {
    const handle = await h.start('guarded', ['order', { account: 'd1', amount: 1 }, activity]);
    const key = `${handle.workflowId}/order`;
    await h.waitForReconcile(key, 'waiting');
    // What the UI's "Send a Signal" list is built from.
    const describe = async (handle: WorkflowHandle) => {
      const meta = (await handle.query('__temporal_workflow_metadata')) as {
        definition?: { signalDefinitions?: Array<{ name: string; description?: string }> };
      };
      return new Map(
        (meta.definition?.signalDefinitions ?? []).map((d) => [d.name, d.description ?? '']),
      );
    };
    const reconcileSignals = await describe(h.reconcile(key));
    expect(reconcileSignals.get('subscribe')).toMatch(/^Internal, not for people/);
    expect(reconcileSignals.get('resolve')).not.toMatch(/^Internal/);
    expect(reconcileSignals.has('recheck')).toBe(true);
    const callerSignals = await describe(handle);
    expect(callerSignals.get('reconciled')).toMatch(/^Internal, not for people/);
    await h.reconcile(key).signal(resolveSignal, {
      applied: false,
      reason: 'no',
      by: 'ops',
      fence: (await store.inspect(key))!.fence,
    });
    await handle.result();
  });
});
