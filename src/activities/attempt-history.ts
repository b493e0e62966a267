import type { KeyEvent } from '../core/types.js';
import { type AttemptTimes, type EarlierVerdict, MAX_EARLIER_VERDICTS } from '../protocol/wire.js';

/** What a person needs to tell one attempt of a key from another: see {@link attemptHistory}. */
export interface AttemptHistory {
  attempt?: AttemptTimes;
  earlier?: EarlierVerdict[];
}

const iso = (at: number): string => new Date(at).toISOString();

/**
 * When attempt `fence` started and became uncertain, and the verdicts on the key's earlier
 * attempts (the latest {@link MAX_EARLIER_VERDICTS}), from the key's events. What the reconcile's
 * details, the verdict template and a batch's dry run show, so a person who checked attempt 1
 * sees that attempt 2 is another one, started later, and that attempt 1 was decided already.
 */
export function attemptHistory(events: readonly KeyEvent[], fence: number): AttemptHistory {
  const mine = events.filter((event) => event.fence === fence);
  const started = mine.find((event) => event.to === 'applying' || event.to === 'held');
  const ended = mine.find((event) => event.to === 'uncertain');
  const earlier = events
    .filter((event) => event.fence < fence && event.from === 'uncertain')
    .filter((event) => event.to === 'done' || event.to === 'free')
    .slice(-MAX_EARLIER_VERDICTS)
    .map((event) => ({
      fence: event.fence,
      applied: event.to === 'done',
      by: event.by,
      at: iso(event.at),
      reason: event.reason,
    }));
  const attempt: AttemptTimes = {
    ...(started ? { startedAt: iso(started.at) } : {}),
    ...(ended ? { endedAt: iso(ended.at) } : {}),
  };
  return {
    ...(started || ended ? { attempt } : {}),
    ...(earlier.length > 0 ? { earlier } : {}),
  };
}
