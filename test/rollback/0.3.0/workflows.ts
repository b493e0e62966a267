/**
 * The caller workflows the released histories were recorded with. Frozen:
 * every checked-in history names these workflow types, so changing what they
 * do breaks replay of every release. Add new workflows instead.
 */
import {
  runSideEffect,
  type SideEffectOptions,
  type SideEffectOutcome,
  sideEffects,
} from './src/workflows/index.js';

export { ReconcileWorkflow } from './src/workflows/index.js';

/** One guarded call. */
export async function guarded(
  effect: string,
  input: unknown,
  options: SideEffectOptions = {},
): Promise<SideEffectOutcome<unknown>> {
  return runSideEffect(effect, input, options);
}

/** The same effect twice with the same step: the second call replays the first. */
export async function guardedTwice(
  effect: string,
  input: unknown,
  options: SideEffectOptions = {},
): Promise<SideEffectOutcome<unknown>[]> {
  const first = await runSideEffect(effect, input, options);
  const second = await runSideEffect(effect, input, options);
  return [first, second];
}

/** One effect over `inputs`, fanned out at most `limit` at a time (recorded from 0.2.0 on). */
export async function fanOut(
  effect: string,
  inputs: unknown[],
  limit: number,
  options: SideEffectOptions = {},
): Promise<PromiseSettledResult<SideEffectOutcome<unknown>>[]> {
  return sideEffects(
    inputs.map((input) => ({ effect, input })),
    { ...options, limit },
  );
}
