import type { Client } from '@temporalio/client';
import { decodeJson } from '../core/json.js';
import type { Store } from '../core/store.js';
import { reconcileWorkflowId, resolveSignal } from '../protocol/wire.js';

/** Reconciles looked at per sweep: a rollout's backlog, not an unbounded scan. */
const MAX_PER_SWEEP = 1000;
const PREFIX = reconcileWorkflowId('');

/**
 * While `compatibleWith` holds a ReconcileWorkflow to 0.1's commands, it never reads the store
 * after its start (that read is an activity 0.1.0 does not replay), so a verdict recorded in the
 * store only (the CLI's fallback when no worker answered, a direct `resolveUncertain`) left it
 * waiting, and reminding, until the option was removed. The leading worker's sweep does the read
 * for it: each running reconcile of the task queue whose key the store has decided gets a
 * `resolve` signal with that verdict, in the fields 0.1.0 takes, so it ends as 0.1.0 would (its
 * `resolveKey` finds the key decided and the stored verdict stands). A reconcile that reads the
 * store itself takes the signal the same way. Returns how many were signalled.
 */
export async function signalDecidedReconciles(
  client: Client,
  store: Store,
  taskQueue: string,
): Promise<number> {
  let signalled = 0;
  let seen = 0;
  const running = client.workflow.list({
    query: `WorkflowType = 'ReconcileWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = '${taskQueue.replaceAll("'", "\\'")}'`,
  });
  for await (const { workflowId } of running) {
    if (++seen > MAX_PER_SWEEP) break;
    if (!workflowId.startsWith(PREFIX)) continue;
    const record = await store.inspect(workflowId.slice(PREFIX.length));
    if (record === undefined || record.state === 'uncertain') continue;
    const verdict =
      record.state === 'done'
        ? { applied: true, result: decodeJson(record.result!) }
        : { applied: false };
    try {
      await client.workflow.getHandle(workflowId).signal(resolveSignal, {
        ...verdict,
        reason: 'decided in the store',
        by: 'sideeffect worker',
      });
      signalled += 1;
    } catch {
      // Ended meanwhile; the next sweep looks again at whatever still runs.
    }
  }
  return signalled;
}
