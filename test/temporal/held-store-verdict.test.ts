/**
 * A worker held to 0.1's commands (`compatibleWith: '0.1'`) on the dev server: a verdict recorded
 * in the store only still ends the waiting ReconcileWorkflow within a few sweeps (the held run
 * cannot read the store itself), and the caller returns it, with no patch marker in either run.
 */
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeJson } from '../../src/core/json.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { scriptEffect, TestStore, waitForReconcile } from '../../src/testing/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { reconcileWorkflowId } from '../../src/workflows/index.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { WORKFLOWS_PATH } from './harness.js';

let connection: Connection;
let native: NativeConnection;

beforeAll(async () => {
  connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
});
afterAll(async () => {
  await native?.close();
  await connection?.close();
});

/** The patch ids a history's markers record. */
function patchMarkers(history: { events?: unknown[] | null }): string[] {
  return (history.events ?? []).flatMap((event) => {
    const marker = (event as { markerRecordedEventAttributes?: { markerName?: string } })
      .markerRecordedEventAttributes;
    return marker?.markerName === 'core_patch' ? [JSON.stringify(marker)] : [];
  });
}

describe("compatibleWith: '0.1' and a verdict recorded in the store only", () => {
  it('ends the held reconcile within a few sweeps, and the caller returns the verdict', async () => {
    const store = new TestStore();
    const client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
    const taskQueue = uniqueTaskQueue('held-store-verdict');
    const worker = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue,
      workflowsPath: WORKFLOWS_PATH,
      plugins: [
        new SideEffectPlugin({
          store,
          effects: { lost: scriptEffect<{ to: string }, { id: string }>(['uncertain']) },
          ttlMs: 5_000,
          sweepEveryMs: 500,
          searchAttributes: false,
          client,
          compatibleWith: '0.1',
        }),
      ],
    });
    await worker.runUntil(async () => {
      const caller = await client.workflow.start('guarded', {
        taskQueue,
        workflowId: `${taskQueue}-order`,
        args: ['lost', { to: 'a' }],
      });
      const key = `${caller.workflowId}/lost`;
      await waitForReconcile(client, key);
      // As the CLI records it when no worker answers its Update in time.
      await store.resolveUncertain(key, {
        applied: true,
        result: encodeJson({ id: 'm-9' }),
        reason: 'seen at the bank',
        by: 'ops@example.com',
      });
      const reconcile = client.workflow.getHandle(reconcileWorkflowId(key));
      const ended = (await Promise.race([
        reconcile.result(),
        new Promise((_, reject) =>
          setTimeout(() => reject(new Error('the held reconcile still waits')), 20_000),
        ),
      ])) as ReconcileResolution;
      expect(ended).toMatchObject({ applied: true, result: { id: 'm-9' }, decidedBy: 'store' });
      expect(await caller.result()).toMatchObject({
        outcome: 'reconciled',
        result: { id: 'm-9' },
      });
      expect(patchMarkers(await reconcile.fetchHistory())).toEqual([]);
      expect(patchMarkers(await caller.fetchHistory())).toEqual([]);
    });
  }, 90_000);
});
