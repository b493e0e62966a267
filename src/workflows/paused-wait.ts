import { InvalidActionError } from '../core/errors.js';
import { parseDuration } from '../protocol/duration.js';

/**
 * The longest wait between two turns of a paused caller unless it sets `pauseCap`: an hour, so a
 * caller paused for a day adds a few hundred events to its history, not the tens of thousands a
 * wait of one cool-down per turn adds (Temporal terminates a run at 51,200).
 */
export const DEFAULT_PAUSE_CAP_MS = 60 * 60 * 1000;

/** No turn comes sooner than this after the last, whatever hint the breaker gave. */
const MIN_PAUSE_MS = 1_000;

/** A caller's pause options, read: the cap of one wait, and the longest total pause if any. */
export interface PauseLimits {
  capMs: number;
  maxPauseMs?: number;
}

/**
 * Reads `pauseCap` and `maxPause`, refusing one that is not a positive duration with an
 * {@link InvalidActionError} naming it: a cap of 0 would wait the floor forever, a mistyped
 * maxPause would fail a payment the first time its provider pauses.
 */
export function pauseLimits(options: {
  pauseCap?: number | string | undefined;
  maxPause?: number | string | undefined;
}): PauseLimits {
  const positive = (field: string, value: number | string): number => {
    const ms = typeof value === 'number' || typeof value === 'string' ? parseDuration(value) : NaN;
    if (ms === undefined || !Number.isFinite(ms) || ms <= 0)
      throw new InvalidActionError(field, `must be a positive duration, got ${String(value)}`);
    return ms;
  };
  const capMs =
    options.pauseCap === undefined ? DEFAULT_PAUSE_CAP_MS : positive('pauseCap', options.pauseCap);
  return options.maxPause === undefined
    ? { capMs }
    : { capMs, maxPauseMs: positive('maxPause', options.maxPause) };
}

/**
 * How long a paused caller sleeps before its next turn: the breaker's hint the first time, then
 * twice the last wait up to `capMs`, never less than the hint (an earlier turn would only be
 * refused again) nor than a second. So a pause of length T costs about log2(cap / hint) + T / cap
 * turns, each one activity and one timer.
 */
export function nextPause(lastMs: number | undefined, hintMs: number, capMs: number): number {
  const doubled = lastMs === undefined ? hintMs : Math.min(2 * lastMs, capMs);
  return Math.max(MIN_PAUSE_MS, hintMs, doubled);
}
