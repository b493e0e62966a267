import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { InvalidActionError } from '../../src/core/errors.js';
import { DEFAULT_PAUSE_CAP_MS, nextPause, pauseLimits } from '../../src/workflows/paused-wait.js';
import { proxySideEffects } from '../../src/workflows/side-effect.js';

/**
 * The figure docs/operations.md states for a paused caller's history, computed here from the wait
 * function the workflow uses. A turn is one effect activity (scheduled, started, failed), the
 * workflow task that reads its failure, one timer (started, fired) and the workflow task that
 * schedules the next attempt: 11 events (test/temporal/paused-wait.test.ts measures it on the
 * dev server). The two patch markers are recorded once.
 */
const EVENTS_PER_TURN = 11;
const MARKERS = 2;
const DAY_MS = 24 * 60 * 60 * 1000;
const OPERATIONS_DOC = fileURLToPath(new URL('../../docs/operations.md', import.meta.url));

/** The turns whose wait starts within `spanMs` of the first pause, for one hint per turn. */
function turnsWithin(spanMs: number, hint: (turn: number) => number, capMs: number): number {
  let elapsed = 0;
  let last: number | undefined;
  let turns = 0;
  while (elapsed < spanMs) {
    last = nextPause(last, hint(turns), capMs);
    elapsed += last;
    turns += 1;
  }
  return turns;
}

describe('the paused wait', () => {
  it('starts at the hint (at least 1 s), doubles, stops at the cap, never below the hint', () => {
    expect(nextPause(undefined, 5_000, DEFAULT_PAUSE_CAP_MS)).toBe(5_000);
    expect(nextPause(undefined, 10, DEFAULT_PAUSE_CAP_MS)).toBe(1_000);
    expect(nextPause(5_000, 5_000, DEFAULT_PAUSE_CAP_MS)).toBe(10_000);
    expect(nextPause(3_000_000, 1_000, DEFAULT_PAUSE_CAP_MS)).toBe(DEFAULT_PAUSE_CAP_MS);
    expect(nextPause(DEFAULT_PAUSE_CAP_MS, 1_000, DEFAULT_PAUSE_CAP_MS)).toBe(DEFAULT_PAUSE_CAP_MS);
    // A breaker whose next half-open is further off than the cap: an earlier turn is refused.
    expect(nextPause(1_000, 2 * DEFAULT_PAUSE_CAP_MS, DEFAULT_PAUSE_CAP_MS)).toBe(
      2 * DEFAULT_PAUSE_CAP_MS,
    );
  });

  it('a caller paused for a day adds at most the events docs/operations.md states', () => {
    // The shortest hint makes the most turns: every wait is at least 1 s and at least the last
    // doubled (up to the cap), so no sequence of hints makes more.
    const worst = turnsWithin(DAY_MS, () => 0, DEFAULT_PAUSE_CAP_MS);
    let seed = 42;
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let run = 0; run < 200; run++) {
      const turns = turnsWithin(DAY_MS, () => Math.floor(random() * 600_000), DEFAULT_PAUSE_CAP_MS);
      expect(turns).toBeLessThanOrEqual(worst);
    }
    const events = worst * EVENTS_PER_TURN + MARKERS;
    process.stdout.write(`paused for a day: ${worst} turns, ${events} events\n`);
    expect(readFileSync(OPERATIONS_DOC, 'utf8')).toContain(
      `a caller paused for a day adds at most ${events}\nevents (${worst} turns;`,
    );
    // One turn per cool-down (the 0.3 loop, 30 s) added about 30,000.
    expect(events).toBeLessThan(DAY_MS / 30_000);
  });

  it('refuses a cap or maxPause that is not a positive duration, naming the option', () => {
    expect(pauseLimits({})).toEqual({ capMs: DEFAULT_PAUSE_CAP_MS });
    expect(pauseLimits({ pauseCap: '10 minutes', maxPause: '2 days' })).toEqual({
      capMs: 600_000,
      maxPauseMs: 2 * DAY_MS,
    });
    for (const [field, value] of [
      ['pauseCap', 0],
      ['pauseCap', -5],
      ['pauseCap', 'soon'],
      ['pauseCap', Number.NaN],
      ['maxPause', '0s'],
      ['maxPause', Number.POSITIVE_INFINITY],
      ['maxPause', ''],
    ] as const) {
      const refusal = (() => {
        try {
          pauseLimits({ [field]: value });
        } catch (error) {
          return error;
        }
      })();
      expect(refusal, `${field}=${String(value)}`).toBeInstanceOf(InvalidActionError);
      expect(refusal).toMatchObject({ code: 'INVALID_ACTION', field });
    }
    expect(() => proxySideEffects({ maxPause: -1 })).toThrow(/invalid maxPause/);
  });
});
