/** Guarded calls (runSideEffect, proxySideEffects) against the dev server: applied then replayed, contention between workflows, failure types. */
import { WorkflowFailedError } from '@temporalio/client';
import { ActivityFailure, ApplicationFailure } from '@temporalio/common';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import type { ReconcileInput } from '../../src/protocol/wire.js';
import { MemoryStore } from '../../src/store/memory.js';
import { clusterSettings, SideEffectPlugin } from '../../src/worker/index.js';
import {
  reconcileWorkflowId,
  SideEffectFailureType,
  type SideEffectOutcome,
} from '../../src/workflows/index.js';
import { TEMPORAL_ADDRESS, uniqueTaskQueue } from '../support/temporal.js';
import { deferred, type Harness, Ledger, startHarness, temporalCli, waitFor } from './harness.js';

interface Payment {
  account: string;
  amount: number;
  hold?: boolean;
}

const ledger = new Ledger();
const store = new MemoryStore();
const applies = new Map<string, number>();
const entered = new Map<string, ReturnType<typeof deferred<void>>>();
const release = deferred();

const ledgerWrite = defineEffect({
  resource: (input: Payment) => `account:${input.account}`,
  apply: async (input: Payment, { key, lease, signal }) => {
    applies.set(key, (applies.get(key) ?? 0) + 1);
    if (input.hold) {
      entered.get(input.account)?.resolve();
      await Promise.race([
        release.promise,
        new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason))),
      ]);
    }
    const line = await ledger.write(lease.resource, lease.fence, key, input.amount);
    return { receipt: `r-${line}` };
  },
});

const effects = {
  ledgerWrite,
  badResult: defineEffect({
    resource: () => 'bad',
    retrySafety: 'safe',
    apply: async () => new Map([['not', 'json']]),
  }),
};

// Heartbeats every ttl/3 = 500 ms while apply runs; the heartbeat timeout must be at least ttl/2.
const TTL_MS = 1_500;
const activity = { heartbeatTimeout: '3 seconds', startToCloseTimeout: '1 minute' };

describe('guarded calls on the dev server', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('side-effect', { store, effects, ttlMs: TTL_MS });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('applies once, then replays the recorded result for the same step; the ledger shows one write', async () => {
    const handle = await h.start('guardedTwice', [
      'ledgerWrite',
      { account: 'a1', amount: 10 },
      { ...activity, step: 'pay' },
    ]);
    const [first, second] = (await handle.result()) as SideEffectOutcome<{ receipt: string }>[];
    const key = `${handle.workflowId}/pay`;
    expect(first).toEqual({ outcome: 'applied', result: { receipt: 'r-1' }, key });
    expect(second).toEqual({ outcome: 'replayed', result: { receipt: 'r-1' }, key });
    expect(ledger.byKey(key)).toHaveLength(1);
    expect(applies.get(key)).toBe(1);
    expect((await store.inspect(key))?.state).toBe('done');
  });

  it('a workflow reset re-runs the code on the same workflow id: the key replays, no second write', async () => {
    const handle = await h.start('guarded', [
      'ledgerWrite',
      { account: 'reset', amount: 3 },
      activity,
    ]);
    const first = (await handle.result()) as SideEffectOutcome<{ receipt: string }>;
    expect(first.outcome).toBe('applied');
    await temporalCli([
      'workflow',
      'reset',
      '--workflow-id',
      handle.workflowId,
      '--type',
      'FirstWorkflowTask',
      '--reason',
      'test: reset after the charge',
    ]);
    // The reset run is the workflow's new current run; its result replays the first.
    const rerun = (await h.client.workflow
      .getHandle(handle.workflowId)
      .result()) as SideEffectOutcome<{
      receipt: string;
    }>;
    expect(rerun).toEqual({ ...first, outcome: 'replayed' });
    expect(ledger.byKey(first.key)).toHaveLength(1);
    expect(applies.get(first.key)).toBe(1);
  });

  it('types calls through proxySideEffects; the default step is the effect name', async () => {
    const handle = await h.start('typedLedgerWrite', [{ account: 'a2', amount: 5 }, activity]);
    const receipt = await handle.result();
    const key = `${handle.workflowId}/ledgerWrite`;
    expect(receipt).toBe(`r-${ledger.entries.length}`);
    expect(ledger.byKey(key)).toHaveLength(1);
  });

  it('two workflows on one resource: the second is contended while the first holds it, then applies', async () => {
    const holding = deferred();
    entered.set('shared', holding);
    const first = await h.start('guarded', [
      'ledgerWrite',
      { account: 'shared', amount: 1, hold: true },
      activity,
    ]);
    await holding.promise;
    const second = await h.start('guarded', [
      'ledgerWrite',
      { account: 'shared', amount: 2 },
      activity,
    ]);

    // The second workflow's activity is retried with SideEffectContended while the first holds the lease.
    await waitFor(async () => {
      const { raw } = await second.describe();
      const pending = raw.pendingActivities?.[0];
      const type =
        pending?.lastFailure?.cause?.applicationFailureInfo?.type ??
        pending?.lastFailure?.applicationFailureInfo?.type;
      return (pending?.attempt ?? 0) >= 2 && type === SideEffectFailureType.Contended
        ? true
        : undefined;
    }, 'the second workflow to be contended');
    const secondKey = `${second.workflowId}/ledgerWrite`;
    expect(applies.get(secondKey)).toBeUndefined();

    release.resolve();
    const a = (await first.result()) as SideEffectOutcome<unknown>;
    const b = (await second.result()) as SideEffectOutcome<unknown>;
    expect(a.outcome).toBe('applied');
    expect(b.outcome).toBe('applied');
    const writes = ledger.entries.filter((entry) => entry.resource === 'account:shared');
    expect(writes.map((entry) => entry.key)).toEqual([a.key, b.key]);
    expect(writes[1]!.fence).toBeGreaterThan(writes[0]!.fence);

    // The history shows it too: the completed attempt was not the first, and the one before was contended.
    const history = await second.fetchHistory();
    const started = history.events?.find(
      (event) => event.activityTaskStartedEventAttributes,
    )?.activityTaskStartedEventAttributes;
    expect(started?.attempt).toBeGreaterThanOrEqual(2);
    expect(started?.lastFailure?.applicationFailureInfo?.type).toBe(
      SideEffectFailureType.Contended,
    );
  });

  it('a result that is not JSON fails the workflow with a non-retryable SideEffectInvalidResult', async () => {
    const handle = await h.start('guarded', ['badResult', {}, activity]);
    const error = await handle.result().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WorkflowFailedError);
    const activityFailure = (error as WorkflowFailedError).cause;
    expect(activityFailure).toBeInstanceOf(ActivityFailure);
    const failure = (activityFailure as ActivityFailure).cause as ApplicationFailure;
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure.type).toBe(SideEffectFailureType.InvalidResult);
    expect(failure.nonRetryable).toBe(true);
  });

  it('reusing a step with another input fails with SideEffectKeyConflict instead of replaying the wrong result', async () => {
    const handle = await h.start('guardedParallel', [
      'ledgerWrite',
      [{ step: 'same', input: { account: 'k1', amount: 1 } }],
      activity,
    ]);
    await handle.result();
    const again = await h.start('guardedTwice', [
      'ledgerWrite',
      { account: 'k2', amount: 1 },
      { ...activity, key: `${handle.workflowId}/same` },
    ]);
    const error = (await again.result().catch((e: unknown) => e)) as WorkflowFailedError;
    const failure = (error.cause as ActivityFailure).cause as ApplicationFailure;
    expect(failure.type).toBe(SideEffectFailureType.KeyConflict);
    expect(ledger.entries.filter((entry) => entry.resource === 'account:k2')).toHaveLength(0);
  });

  it('replays every recorded history without nondeterminism', async () => {
    expect(await h.replayAll()).toEqual([]);
  });
});

describe('the plugin with its defaults', () => {
  it('on a Worker built as getting-started.md builds it, bundles the library workflows and runs a ReconcileWorkflow', async () => {
    const own = new MemoryStore();
    const taskQueue = uniqueTaskQueue('defaults');
    const { connectionOptions, namespace } = clusterSettings({ address: TEMPORAL_ADDRESS });
    const connection = await NativeConnection.connect(connectionOptions);
    const plugin = new SideEffectPlugin({ store: own, effects, ttlMs: TTL_MS });
    const worker = await Worker.create({ connection, namespace, taskQueue, plugins: [plugin] });
    const running = worker.run();
    try {
      // A key the store never saw is not uncertain: the reconcile ends at once as decided by the store.
      const key = `${taskQueue}/nothing`;
      const input: ReconcileInput = { key, resource: 'r', reason: 'test' };
      const resolution = await plugin.client.workflow.execute('ReconcileWorkflow', {
        taskQueue,
        workflowId: reconcileWorkflowId(key),
        args: [input],
      });
      expect(resolution).toMatchObject({ key, applied: false, decidedBy: 'store' });
    } finally {
      worker.shutdown();
      await running;
      await connection.close();
    }
  });
});
