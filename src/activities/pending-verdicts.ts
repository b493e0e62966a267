import { decodeJson } from '../core/json.js';
import type { Store } from '../core/store.js';
import { holdsVerdicts } from '../core/store.js';
import type { Key } from '../core/types.js';
import type { ResolveInput } from '../core/verdict.js';
import type { AnyEffect } from './effect.js';
import { verdictResultError } from './result-check.js';

/** A held verdict this worker refused: what the ReconcileWorkflow lists among its refused verdicts. */
export interface RefusedHeldVerdict {
  at: string;
  input: ResolveInput & { fence: number };
  error: string;
}

/**
 * Judges the verdicts held on `key` for a worker's check, oldest first, with the effect's result
 * check (src/activities/result-check.ts): the first one that passes decides the key (first
 * resolution wins); a refused one leaves it uncertain, recorded with why. A verdict this worker
 * cannot judge (an applied one while the effect is not known here) stops the walk, so a later
 * verdict never overtakes it; a worker that knows the effect judges it.
 */
export async function judgeHeldVerdicts(
  store: Store,
  effects: Record<string, AnyEffect>,
  key: Key,
  effectName: () => Promise<string | undefined>,
): Promise<RefusedHeldVerdict[]> {
  if (!holdsVerdicts(store)) return [];
  const refused: RefusedHeldVerdict[] = [];
  const pending = (await store.heldVerdicts(key)).filter((held) => held.state === 'pending');
  let effect: string | undefined;
  for (const held of pending) {
    let error: string | undefined;
    let result: unknown;
    if (held.applied) {
      effect ??= await effectName();
      const known = effect === undefined ? undefined : effects[effect];
      if (known === undefined) break;
      try {
        result = held.result && decodeJson(held.result);
        error = await verdictResultError(effect, known, result);
      } catch (cause) {
        error = `the result is not JSON: ${cause instanceof Error ? cause.message : String(cause)}`;
      }
    }
    const judged = await store.judgeVerdict(
      held.id,
      error === undefined ? { accept: true } : { accept: false, why: error },
    );
    if (judged?.state === 'refused')
      refused.push({
        at: new Date(held.at).toISOString(),
        input: {
          applied: held.applied,
          ...(held.applied ? { result } : {}),
          reason: held.reason,
          ...(held.by === undefined ? {} : { by: held.by }),
          fence: held.fence,
        },
        error: `verdict held in the store refused: ${judged.why ?? error}`,
      });
  }
  return refused;
}
