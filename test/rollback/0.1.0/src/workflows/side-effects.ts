import { fanInLimit } from '../syncx/index.js';
import { runSideEffect, type SideEffectOptions, type SideEffectOutcome } from './side-effect.js';

/** One call of a fan-out: which effect, its input, and its step (default `<effect>/<index>`). */
export interface SideEffectCall<I = unknown> {
  effect: string;
  input: I;
  step?: string;
  options?: SideEffectOptions;
}

/**
 * Runs many guarded effects from one workflow, at most `limit` at a time,
 * results in call order, each settled on its own: one failure does not lose
 * the others' outcomes. Built on fanInLimit (promises only, no timers), so a
 * replay schedules the same activities in the same order.
 *
 * Each call needs its own step, because the key is `<workflowId>/<step>`: the
 * default `<effect>/<index>` is stable as long as the list is.
 */
export function sideEffects<R = unknown>(
  calls: readonly SideEffectCall[],
  options: SideEffectOptions & { limit: number },
): Promise<PromiseSettledResult<SideEffectOutcome<R>>[]> {
  const { limit, ...shared } = options;
  return fanInLimit(calls.length, limit, (i) => {
    const call = calls[i]!;
    return runSideEffect<R>(call.effect, call.input, {
      ...shared,
      ...call.options,
      step: call.step ?? `${call.effect}/${i}`,
    });
  });
}
