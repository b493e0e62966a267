import type { InspectAnswer, RejectedResolve, Verdict } from '../protocol/wire.js';
import { takePatch } from './patch.js';

/**
 * Marks runs that read the store naming their effect, so the verdicts held there for a worker's
 * check (recorded by the CLI when no worker answered in time) are judged with that effect's
 * result check, and list the held verdicts refused among their refused verdicts. Histories
 * recorded before it read the store with the key alone (the worker then judges with the effect in
 * the run's memo, if any).
 */
export const HELD_VERDICTS_PATCH = 'sideeffect-held-verdicts';

type Inspect = (
  key: string,
  about?: { effect?: string },
) => Promise<Verdict | null | InspectAnswer>;

/**
 * The store's verdict on `key`, or null while it is uncertain; held verdicts the worker refused
 * on the way are handed to `refused`, so the `status` query says why the key is still waiting.
 */
export async function readStore(
  inspect: Inspect,
  key: string,
  effect: string | undefined,
  refused: (rejected: RejectedResolve) => void,
): Promise<Verdict | null> {
  if (!takePatch(HELD_VERDICTS_PATCH)) return (await inspect(key)) as Verdict | null;
  const answer = await inspect(key, effect === undefined ? {} : { effect });
  // A worker without this change answers the verdict alone (mid-rollout).
  if (answer === null || !('refused' in answer)) return answer;
  for (const { at, input, error } of answer.refused) refused({ at, input, error });
  return answer.verdict;
}
