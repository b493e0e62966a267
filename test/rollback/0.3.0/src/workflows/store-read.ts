import type {
  InspectAnswer,
  PendingVerdictSummary,
  RejectedResolve,
  Verdict,
} from '../protocol/wire.js';
import { takePatch } from './patch.js';

type Inspect = (
  key: string,
  about?: { effect?: string },
) => Promise<Verdict | null | InspectAnswer>;

/**
 * The store's verdict on `key`, or null while it is uncertain; pending verdicts the worker refused
 * on the way are handed to `refused`, so the `status` query says why the key is still waiting,
 * and those still pending (none once decided) to `pending`.
 */
export async function readStore(
  inspect: Inspect,
  key: string,
  effect: string | undefined,
  refused: (rejected: RejectedResolve) => void,
  pending: (waiting: PendingVerdictSummary[]) => void = () => {},
): Promise<Verdict | null> {
  if (!takePatch('heldVerdicts')) return (await inspect(key)) as Verdict | null;
  const answer = await inspect(key, effect === undefined ? {} : { effect });
  // A worker without this change answers the verdict alone (mid-rollout).
  if (answer === null || !('refused' in answer)) return answer;
  for (const { at, input, error } of answer.refused) refused({ at, input, error });
  pending(answer.pending ?? []);
  return answer.verdict;
}
