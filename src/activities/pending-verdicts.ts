import { decodeJson } from '../core/json.js';
import type { Store } from '../core/store.js';
import { keepsPendingVerdicts } from '../core/store.js';
import type { Key } from '../core/types.js';
import type { ResolveInput } from '../core/verdict.js';
import type { AnyEffect } from './effect.js';
import { verdictResultError } from './result-check.js';

/** A pending verdict this worker refused: what the ReconcileWorkflow lists among its refused verdicts. */
export interface RefusedPendingVerdict {
  at: string;
  input: ResolveInput & { fence: number };
  error: string;
}

/**
 * Judges the verdicts verdict on `key` for a worker's check, oldest first, with the effect's result
 * check (src/activities/result-check.ts): the first one that passes decides the key (first
 * resolution wins); a refused one leaves it uncertain, recorded with why. A verdict this worker
 * cannot judge (an applied one while the effect is not known here) stops the walk, so a later
 * verdict never overtakes it; a worker that knows the effect judges it.
 */
export async function judgePendingVerdicts(
  store: Store,
  effects: Record<string, AnyEffect>,
  key: Key,
  effectName: () => Promise<string | undefined>,
): Promise<RefusedPendingVerdict[]> {
  if (!keepsPendingVerdicts(store)) return [];
  const refused: RefusedPendingVerdict[] = [];
  const pending = (await store.pendingVerdicts(key)).filter(
    (verdict) => verdict.state === 'pending',
  );
  let effect: string | undefined;
  for (const verdict of pending) {
    let error: string | undefined;
    let result: unknown;
    if (verdict.applied) {
      effect ??= await effectName();
      const known = effect === undefined ? undefined : effects[effect];
      if (known === undefined) break;
      try {
        result = verdict.result && decodeJson(verdict.result);
        error = await verdictResultError(effect, known, result);
      } catch (cause) {
        error = `the result is not JSON: ${cause instanceof Error ? cause.message : String(cause)}`;
      }
    }
    const judged = await store.judgeVerdict(
      verdict.id,
      error === undefined ? { accept: true } : { accept: false, why: error },
    );
    if (judged?.state === 'refused')
      refused.push({
        at: new Date(verdict.at).toISOString(),
        input: {
          applied: verdict.applied,
          ...(verdict.applied ? { result } : {}),
          reason: verdict.reason,
          ...(verdict.by === undefined ? {} : { by: verdict.by }),
          fence: verdict.fence,
        },
        error: `verdict pending in the store refused: ${judged.why ?? error}`,
      });
  }
  return refused;
}
