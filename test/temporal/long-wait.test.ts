/**
 * A wait of months, compressed: thousands of malformed signals (one of 1.5 MB)
 * and hundreds of reminders must not grow one run's history without bound nor
 * break the status query, and the waiting caller must still get the verdict
 * after its ReconcileWorkflow continued as new. `npm test` sends enough to
 * cross the event bound (two bursts) and waits for a few reminders, one of
 * them in a run after the hand-over; `npm run test:long` sends the soak's
 * thousands and waits for hundreds of reminders.
 */
import type { WorkflowHandle } from '@temporalio/client';
import { Runtime } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { MemoryStore } from '../../src/store/memory.js';
import {
  type ReconcileStatus,
  reconcileWorkflowId,
  resolveSignal,
  type SideEffectOutcome,
  statusQuery,
} from '../../src/workflows/index.js';
import { sized } from '../support/tier.js';
import { type Harness, Ledger, startHarness } from './harness.js';

const ledger = new Ledger();
const store = new MemoryStore();
const REMINDER = 'side effect outcome still uncertain: waiting for a resolve signal';
const REFUSED = 'resolve refused; still waiting';

// Thousands of expected warnings would bury the output.
const logger = Runtime.instance().logger;
const log = logger.log.bind(logger);
vi.spyOn(logger, 'log').mockImplementation((level, message, meta) => {
  if (message !== REMINDER && message !== REFUSED) log(level, message, meta);
});

const effects = {
  order: defineEffect({
    resource: (input: { account: string }) => `account:${input.account}`,
    apply: async (input: { account: string }, { key, lease }) => {
      await ledger.write(lease.resource, lease.fence, key, input);
      throw new Error('connection reset after the write');
    },
  }),
};

/** Every run of the key's ReconcileWorkflow, oldest first, with its history's events. */
async function runsOf(h: Harness, key: string) {
  const runs: Array<{ runId: string; events: HistoryEvent[] }> = [];
  for await (const info of h.client.workflow.list({
    query: `WorkflowId="${reconcileWorkflowId(key)}"`,
  })) {
    const history = await h.client.workflow.getHandle(info.workflowId, info.runId).fetchHistory();
    runs.push({ runId: info.runId, events: (history.events ?? []) as HistoryEvent[] });
  }
  return runs;
}

type HistoryEvent = Record<string, unknown>;

/** The ReconcileWorkflow's own bound: past it, a run continues as new at its next quiet task. */
const EVENT_BOUND = 500;

/**
 * Malformed signals, then one huge one: their events alone are past EVENT_BOUND, so at least one
 * run hands over. Reminders fire about one a second on the dev server (a timer of 100 ms is a
 * workflow task apart from the next): the quick size counts on a few, the soak on hundreds.
 */
const MALFORMED = sized(500, 1_999);
const REMINDERS = sized(10, 500);

/** Waits until the newest run of the workflow has fewer events than `bound`. */
async function newestRunUnder(handle: WorkflowHandle, bound: number): Promise<void> {
  const deadline = Date.now() + 180_000;
  for (;;) {
    const { historyLength } = await handle.describe();
    if (historyLength < bound) return;
    if (Date.now() > deadline)
      throw new Error(
        `the newest run still has ${historyLength} events: it did not continue as new`,
      );
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** Events of one kind, told by their attributes field (e.g. `timerFiredEventAttributes`). */
function count(events: HistoryEvent[], attributes: string): number {
  return events.filter((event) => event[attributes] != null).length;
}

describe('a reconcile that waits for months', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('long-wait', {
      store,
      effects,
      ttlMs: 5_000,
      remindEveryMs: 100,
    });
  });
  afterAll(async () => {
    await h?.close();
  });

  it(`${MALFORMED + 1} malformed signals (one of 1.5 MB) and ${REMINDERS} reminders: it continues as new, status answers throughout, the caller gets the verdict`, async () => {
    const caller = await h.start('guarded', [
      'order',
      { account: 'lw1' },
      {
        heartbeatTimeout: '10 seconds',
        startToCloseTimeout: '1 minute',
        recheckEvery: '2 seconds',
      },
    ]);
    const key = `${caller.workflowId}/order`;
    await h.waitForReconcile(key, 'waiting');
    const reconcile: WorkflowHandle = h.reconcile(key);

    // The status query is asked all along, as an operator's UI would.
    const statuses: ReconcileStatus[] = [];
    const queryErrors: unknown[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        try {
          statuses.push(await reconcile.query(statusQuery));
        } catch (error) {
          queryErrors.push(error);
        }
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    })();

    // Bursts of 250 from a few senders at once (a burst of thousands would land in one workflow
    // task, and an activation past the SDK's 5 s isolate timeout takes the worker down with it).
    // A run can only continue as new from a workflow task that no new event overtook, so while a
    // flood lasts it cannot hand over; between bursts the test waits until the newest run is back
    // under the bound, as a finite flood lets it. A run that never hands over fails that wait.
    const huge = { applied: true, result: 'x'.repeat(1_500_000), reason: 'a pasted dump' };
    let sent = 0;
    const sender = async (from: number, to: number, lane: number) => {
      for (let i = from + lane; i < to; i += 4) {
        await reconcile.signal(resolveSignal, {
          applied: 'maybe',
          note: `malformed #${i}`,
        } as never);
        sent += 1;
      }
    };
    for (let from = 0; from < MALFORMED; from += 250) {
      const to = Math.min(from + 250, MALFORMED);
      await Promise.all([0, 1, 2, 3].map((lane) => sender(from, to, lane)));
      await newestRunUnder(reconcile, EVENT_BOUND);
    }
    // The big one after every lane is done, so it is the newest refused input and stays kept.
    await reconcile.signal(resolveSignal, huge as never);
    sent += 1;
    expect(sent).toBe(MALFORMED + 1);
    // Reminders fire one workflow task apart: on a loaded machine that is up to a second each.
    // The newest run must fire one too: the reminder's schedule survives the hand-over.
    const deadline = Date.now() + 900_000;
    for (;;) {
      const fired = count(
        (await runsOf(h, key)).flatMap((run) => run.events),
        'timerFiredEventAttributes',
      );
      const newest = (await reconcile.fetchHistory()).events ?? [];
      const firedInNewest = count(newest as HistoryEvent[], 'timerFiredEventAttributes');
      if (fired >= REMINDERS && firedInNewest > 0) break;
      if (Date.now() > deadline)
        throw new Error(`only ${fired} reminders fired (${firedInNewest} in the newest run)`);
      // Every poll reads each run's history (one holds the 1.5 MB input): not too often.
      await new Promise((resolve) => setTimeout(resolve, sized(2_000, 10_000)));
    }

    const waiting = await reconcile.query(statusQuery);
    expect(waiting.state).toBe('waiting');
    expect(waiting.subscribers).toEqual([caller.workflowId]);
    expect(waiting.rejected.length).toBeLessThanOrEqual(20);
    expect(JSON.stringify(waiting).length).toBeLessThan(100_000);
    expect(waiting.runs).toBeGreaterThanOrEqual(1);
    // The 1.5 MB input (sent last, so still among the 20 kept) was refused for its size and kept as a prefix.
    const big = waiting.rejected.find((rejected) => (rejected.inputChars ?? 0) > 1_500_000);
    expect(big?.error).toContain('over the limit of 1048576');
    expect(JSON.stringify(big?.input).length).toBeLessThan(4_096);

    await reconcile.signal(resolveSignal, {
      applied: true,
      result: { receipt: 'r-ops' },
      reason: 'found in the ledger',
      by: 'ops',
      attempt: 'any',
    });
    const outcome = (await caller.result()) as SideEffectOutcome<unknown>;
    expect(outcome).toEqual({ outcome: 'reconciled', result: { receipt: 'r-ops' }, key });
    expect(ledger.byKey(key)).toHaveLength(1);
    polling = false;
    await poller;

    expect(queryErrors).toEqual([]);
    expect(statuses.length).toBeGreaterThan(sized(5, 20));
    const runs = await runsOf(h, key);
    expect(runs.length).toBeGreaterThanOrEqual(2);
    const all = runs.flatMap((run) => run.events);
    expect(count(all, 'workflowExecutionContinuedAsNewEventAttributes')).toBe(runs.length - 1);
    expect(count(all, 'timerFiredEventAttributes')).toBeGreaterThanOrEqual(REMINDERS);
    expect(count(all, 'workflowExecutionSignaledEventAttributes')).toBeGreaterThanOrEqual(
      MALFORMED + 2,
    );
    for (const run of runs) expect(run.events.length).toBeLessThan(1_000);

    // The caller subscribed once; its rechecks signal again only when they cannot confirm the
    // subscription (a status query that timed out on this loaded machine), never on every recheck.
    const callerHistory = (await caller.fetchHistory()).events ?? [];
    const subscribes = all.filter(
      (event) =>
        (event.workflowExecutionSignaledEventAttributes as { signalName?: string } | null)
          ?.signalName === 'subscribe',
    );
    expect(subscribes.length).toBeGreaterThanOrEqual(1);
    expect(subscribes.length).toBeLessThanOrEqual(3);
    expect(callerHistory.length).toBeLessThan(150);
  }, 1_200_000);

  it('replays every history of the wait, across the continue-as-new', async () => {
    expect(await h.replayAll()).toEqual([]);
  });
});
