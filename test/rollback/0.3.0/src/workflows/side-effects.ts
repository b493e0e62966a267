import { settleAll } from '../syncx/index.js';
import { toCapacity } from '../syncx/validate.js';
import {
  type EffectInput,
  type EffectName,
  type EffectResult,
  guardedCall,
  type SideEffectOptions,
  type SideEffectOutcome,
  type UntypedOnly,
} from './side-effect.js';

/** One call of a fan-out: which effect, its input, and its step. */
export interface SideEffectCall<I = unknown> {
  /** The effect's name, as registered on the worker. */
  effect: string;
  input: I;
  /**
   * Names this call; the key is `<workflowId>/<step>`.
   * @default `<effect>/<index>`, stable as long as the list is
   */
  step?: string;
  /**
   * Options of this call only, over the fan-out's shared ones.
   * @default the shared options
   */
  options?: SideEffectOptions;
}

/** One call of a typed fan-out over `E` (`typeof effects`): the name must be an effect of `E`, the input its input. */
export type SideEffectCallFor<E> = {
  [K in EffectName<E>]: SideEffectCall<EffectInput<E[K]>> & { effect: K };
}[EffectName<E>];

/**
 * Runs many guarded effects from one workflow, at most `limit` at a time,
 * results in call order, each settled on its own: one failure does not lose
 * the others' outcomes. Built on settleAll (promises only, no timers), so a
 * replay schedules the same activities in the same order.
 *
 * Each call needs its own step, because the key is `<workflowId>/<step>`: the
 * default `<effect>/<index>` is stable as long as the list is. With `typeof effects`
 * as its type argument, each call's effect name and input are checked at compile time.
 */
export function sideEffects<E>(
  calls: readonly SideEffectCallFor<E>[],
  options: SideEffectOptions & { limit: number },
): Promise<PromiseSettledResult<SideEffectOutcome<EffectResult<E[EffectName<E>]>>>[]>;
export function sideEffects<R = unknown>(
  calls: readonly SideEffectCall[] & UntypedOnly<R>,
  options: SideEffectOptions & { limit: number },
): Promise<PromiseSettledResult<SideEffectOutcome<R>>[]>;
export function sideEffects(
  calls: readonly SideEffectCall[],
  options: SideEffectOptions & { limit: number },
): Promise<PromiseSettledResult<SideEffectOutcome<unknown>>[]> {
  const { limit, ...shared } = options;
  // Checked under its own name: a bad `limit` must not be reported as settleAll's `concurrency`.
  const concurrency = toCapacity(limit, 'limit');
  return settleAll(
    calls.length,
    (i) => {
      const call = calls[i]!;
      return guardedCall(call.effect, call.input, {
        ...shared,
        ...call.options,
        step: call.step ?? `${call.effect}/${i}`,
      });
    },
    { concurrency },
  );
}
