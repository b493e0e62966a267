/** The fault harness's workflows, bundled once per run with the library's ReconcileWorkflow. */
import { runSideEffect, type SideEffectOutcome } from '../../src/workflows/index.js';
import type { EffectName, PostInput, PostResult } from './effects.js';

export { ReconcileWorkflow } from '../../src/workflows/index.js';

/** One guarded call of a job. The same step twice with the same input is one action (a replay). */
export interface Call {
  effect: EffectName;
  step: string;
  input: PostInput;
}

/** Runs the calls one after the other; every call survives kills, pauses and outages by retrying. */
export async function faultJob(calls: Call[]): Promise<SideEffectOutcome<PostResult>[]> {
  const outcomes: SideEffectOutcome<PostResult>[] = [];
  for (const call of calls) {
    outcomes.push(
      await runSideEffect<PostResult>(call.effect, call.input, {
        step: call.step,
        startToCloseTimeout: '30 seconds',
        // Above ttlMs/2 (the lease heartbeat runs every ttlMs/3); a paused worker is noticed quickly.
        heartbeatTimeout: '2 seconds',
        retry: { initialInterval: '200 ms', backoffCoefficient: 2, maximumInterval: '2 seconds' },
        // A verdict signal that never arrived (server restarted, subscriber missed) is re-asked.
        recheckEvery: '5 seconds',
      }),
    );
  }
  return outcomes;
}
