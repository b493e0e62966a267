/**
 * A caller paused by a breaker a person opened, on PgStore and the dev server, with a short
 * cool-down (200 ms, so the breaker's hint is the 1 s floor) and `retry: { maximumAttempts: 1 }`
 * (every refused attempt reaches the workflow): the waits between its turns double, each turn is
 * one activity and one timer, and the history grows ever slower, where 0.3 added a turn per
 * cool-down. A caller with `maxPause` gets a non-retryable `SideEffectPaused` it can handle.
 *
 * Counts and the history's own timers only: how long anything took is printed, never bounded.
 * The rate check compares event counts in two windows of equal length by the server's clock.
 */
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { History } from '@temporalio/common/lib/proto-utils.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { SideEffectFailureType } from '../../src/protocol/failures.js';
import { PgStore } from '../../src/store/postgres/index.js';
import type { SideEffectOutcome } from '../../src/workflows/index.js';
import { patchesIn } from '../histories/markers.js';
import { type PgHarness, pgHarness } from '../store/pg-support/harness.js';
import { type Harness, startHarness, waitFor } from './harness.js';

const GROUP = 'maintenance';
/** Events of one turn: 3 of the activity, 3 + 3 of two workflow tasks, 2 of the timer. */
const EVENTS_PER_TURN = 11;
/** Turns watched: timers of 1, 2, 4, 8 and 16 s, then the sixth (at the 16 s cap) starts. */
const TIMERS = 6;

type Event = NonNullable<History['events']>[number];
const at = (event: Event): number => {
  const time = event.eventTime!;
  return Number(time.seconds) * 1000 + Math.floor((time.nanos ?? 0) / 1e6);
};
const timerMs = (event: Event): number => {
  const timeout = event.timerStartedEventAttributes!.startToFireTimeout!;
  return Number(timeout.seconds) * 1000 + Math.floor((timeout.nanos ?? 0) / 1e6);
};

describe('a caller paused by a breaker opened by hand', () => {
  let pgh: PgHarness;
  let store: PgStore;
  let h: Harness;
  const applied: string[] = [];

  beforeAll(async () => {
    pgh = await pgHarness('paused_wait', { movableClock: false });
    store = new PgStore({ pool: pgh.db.pool, schema: pgh.db.schema });
    h = await startHarness('paused_wait', {
      store,
      ttlMs: 5_000,
      effects: {
        provider: defineEffect({
          resource: (input: { id: string }) => `order:${input.id}`,
          breaker: { group: GROUP, coolDownMs: 200, maxCoolDownMs: 400 },
          async apply(input: { id: string }) {
            applied.push(input.id);
            return { done: input.id };
          },
        }),
      },
    });
    await store.setBreaker(GROUP, {
      state: 'open',
      reason: "the provider's maintenance",
      by: 'oncall',
    });
  });

  afterAll(async () => {
    await h?.close();
    await pgh?.close();
  });

  it('waits doubling timers, one activity and one timer a turn, events per second falling', async () => {
    const caller = await h.start('guarded', [
      'provider',
      { id: 'slow' },
      { retry: { maximumAttempts: 1 }, pauseCap: '16s' },
    ]);
    const given = await h.start('guarded', [
      'provider',
      { id: 'given-up' },
      { retry: { maximumAttempts: 1 }, maxPause: '3s' },
    ]);

    // maxPause: a typed, non-retryable failure the workflow could catch; nothing was attempted.
    const failure = await given.result().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(WorkflowFailedError);
    const cause = (failure as WorkflowFailedError).cause;
    expect(cause).toBeInstanceOf(ApplicationFailure);
    expect(cause).toMatchObject({ type: SideEffectFailureType.Paused, nonRetryable: true });
    const details = (cause as ApplicationFailure).details?.[0] as {
      key: string;
      group: string;
      pausedMs: number;
      turns: number;
    };
    expect(details).toMatchObject({ key: `${given.workflowId}/provider`, group: GROUP });
    expect(details.pausedMs).toBeGreaterThanOrEqual(3_000);
    expect(details.turns).toBeGreaterThanOrEqual(2);

    const events = await waitFor(
      async () => {
        const events = (await caller.fetchHistory()).events ?? [];
        const timers = events.filter((e) => e.timerStartedEventAttributes != null);
        return timers.length >= TIMERS ? events : undefined;
      },
      `${TIMERS} timers of the paused caller`,
      240_000,
    );
    await store.setBreaker(GROUP, { state: 'closed', reason: 'maintenance over', by: 'oncall' });
    const outcome = (await caller.result()) as SideEffectOutcome<unknown>;
    expect(outcome).toMatchObject({ outcome: 'applied', result: { done: 'slow' } });
    expect(applied).toEqual(['slow']);

    const timers = events.filter((e) => e.timerStartedEventAttributes != null);
    // The hint is the 1 s floor (cool-down 200 ms); each wait twice the last, up to pauseCap.
    expect(timers.slice(0, TIMERS).map(timerMs)).toEqual([1, 2, 4, 8, 16, 16].map((s) => s * 1000));

    // One activity and one timer a turn: the events from one timer's start to the next.
    const index = (e: Event) => events.indexOf(e);
    const perTurn = timers.slice(1).map((t, i) => index(t) - index(timers[i]!));
    const activities = (from: Event, to: Event) =>
      events
        .slice(index(from), index(to))
        .filter((e) => e.activityTaskScheduledEventAttributes != null).length;
    for (let i = 1; i < timers.length; i++) expect(activities(timers[i - 1]!, timers[i]!)).toBe(1);
    expect(Math.min(...perTurn)).toBe(EVENTS_PER_TURN);

    // Events per second: the first three turns' span, against as long a window from turn five.
    const first = { from: at(events[0]!), to: at(timers[3]!) };
    const later = { from: at(timers[4]!), to: at(timers[4]!) + (first.to - first.from) };
    const inWindow = (w: { from: number; to: number }) =>
      events.filter((e) => at(e) >= w.from && at(e) < w.to).length;
    const firstCount = inWindow(first);
    const laterCount = inWindow(later);
    process.stdout.write(
      `paused caller: ${JSON.stringify({ perTurn, windowMs: first.to - first.from, firstCount, laterCount, maxPause: details })}\n`,
    );
    expect(laterCount).toBeLessThan(firstCount / 2);

    expect(patchesIn({ events })).toEqual([
      'sideeffect-effect-wait-cancellation',
      'sideeffect-breaker-paused-wait',
      'sideeffect-breaker-paused-backoff',
    ]);
    expect(await h.replayAll()).toEqual([]);
  }, 300_000);
});
