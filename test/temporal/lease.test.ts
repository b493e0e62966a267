/** The apply's AbortSignal on the dev server: lease lost to a takeover (late write fenced off), and activity cancellation. */
import { WorkflowFailedError } from '@temporalio/client';
import { CancelledFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { FenceStaleError, LeaseLostError } from '../../src/core/errors.js';
import { libraryActivityNames } from '../../src/protocol/wire.js';
import { MemoryStore } from '../../src/store/memory.js';
import { resolveUpdate, type SideEffectOutcome } from '../../src/workflows/index.js';
import { deferred, type Harness, Ledger, startHarness, waitFor } from './harness.js';

interface Job {
  resource: string;
  /** The first apply of the key waits until its signal aborts, then gives up. */
  stall?: boolean;
  /** After the abort, write anyway (a holder that did not notice in time). */
  lateWrite?: boolean;
}

interface Stalled {
  entered: ReturnType<typeof deferred<void>>;
  abortReason?: unknown;
  lateWriteError?: unknown;
}

/** The store's clock runs `skew` ms ahead of the worker's: moving it expires leases without waiting. */
let skew = 0;
/** Renewals of a paused holder's resource wait here: a paused process sends none, so its lease runs out. */
const paused = new Map<string, Promise<void>>();

class PausableStore extends MemoryStore {
  override async renew(...args: Parameters<MemoryStore['renew']>) {
    await paused.get(args[1].resource);
    return super.renew(...args);
  }
}

const store = new PausableStore({ now: () => Date.now() + skew });
const ledger = new Ledger();
const applies = new Map<string, number>();
const stalled = new Map<string, Stalled>();

const effects = {
  write: defineEffect({
    resource: (input: Job) => input.resource,
    apply: async (input: Job, { key, lease, signal }) => {
      const attempt = (applies.get(key) ?? 0) + 1;
      applies.set(key, attempt);
      const stall = input.stall && attempt === 1 ? stalled.get(input.resource) : undefined;
      if (stall) {
        stall.entered.resolve();
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        stall.abortReason = signal.reason;
        if (input.lateWrite) {
          try {
            await ledger.write(lease.resource, lease.fence, key, 'late');
          } catch (error) {
            stall.lateWriteError = error;
            throw error;
          }
        }
        throw signal.reason;
      }
      await ledger.write(lease.resource, lease.fence, key, 'on time');
      return { fence: lease.fence };
    },
  }),
};

const TTL_MS = 1_500;
const activity = { heartbeatTimeout: '3 seconds', startToCloseTimeout: '1 minute' };
/** A paused holder sends no heartbeat either: Temporal must not time it out before the store does. */
const pausedHolder = { ...activity, heartbeatTimeout: '50 seconds' };

describe('the apply signal', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('lease', { store, effects, ttlMs: TTL_MS });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('fires when the lease is taken over during a long apply; the late write is fenced off and the new holder stands', async () => {
    const stall: Stalled = { entered: deferred() };
    stalled.set('doc:1', stall);
    const old = await h.start('guarded', [
      'write',
      { resource: 'doc:1', stall: true, lateWrite: true },
      pausedHolder,
    ]);
    await stall.entered.promise;

    // The old holder is paused past its lease: no renewal reaches the store until the next holder
    // has the resource (else a renewal, even a late one, keeps the lease of a holder still there).
    const resume = deferred();
    paused.set('doc:1', resume.promise);
    skew += 60_000;
    const next = await h.start('guarded', ['write', { resource: 'doc:1' }, pausedHolder]);
    const taken = (await next.result()) as SideEffectOutcome<{ fence: number }>;
    expect(taken.outcome).toBe('applied');
    paused.delete('doc:1');
    resume.resolve();

    await waitFor(() => stall.lateWriteError, 'the old holder to try its late write');
    expect(stall.abortReason).toBeInstanceOf(LeaseLostError);
    expect(stall.lateWriteError).toBeInstanceOf(FenceStaleError);
    expect(ledger.entries.filter((entry) => entry.resource === 'doc:1')).toEqual([
      { resource: 'doc:1', fence: taken.result.fence, key: taken.key, value: 'on time' },
    ]);
    expect(ledger.sink.highestFence('doc:1')).toBe(taken.result.fence);

    // The old key cannot know whether its apply counted: it waits for a verdict, then runs again after the new holder.
    const oldKey = `${old.workflowId}/write`;
    expect((await store.inspect(oldKey))?.state).toBe('uncertain');
    await h.waitForReconcile(oldKey, 'waiting');
    await h.reconcile(oldKey).executeUpdate(resolveUpdate, {
      args: [
        {
          applied: false,
          reason: 'the late write was refused by the fence',
          fence: (await store.inspect(oldKey))!.fence,
        },
      ],
    });
    const rerun = (await old.result()) as SideEffectOutcome<{ fence: number }>;
    expect(rerun.outcome).toBe('applied');
    expect(rerun.result.fence).toBeGreaterThan(taken.result.fence);
    expect(ledger.entries.filter((entry) => entry.resource === 'doc:1').map((e) => e.key)).toEqual([
      taken.key,
      oldKey,
    ]);
    expect(ledger.entries.some((entry) => entry.value === 'late')).toBe(false);
  });

  it('fires when Temporal cancels the activity; the key is left uncertain, not silently free', async () => {
    const stall: Stalled = { entered: deferred() };
    stalled.set('doc:2', stall);
    const handle = await h.start('guarded', [
      'write',
      { resource: 'doc:2', stall: true },
      activity,
    ]);
    await stall.entered.promise;
    await handle.cancel();

    const error = (await handle.result().catch((e: unknown) => e)) as WorkflowFailedError;
    expect(error).toBeInstanceOf(WorkflowFailedError);
    expect(error.cause).toBeInstanceOf(CancelledFailure);
    await waitFor(() => stall.abortReason, 'the apply to see the cancellation');
    expect(stall.abortReason).not.toBeInstanceOf(LeaseLostError);
    const key = `${handle.workflowId}/write`;
    await waitFor(
      async () => ((await store.inspect(key))?.state === 'uncertain' ? true : undefined),
      'the key to be uncertain',
    );
  });

  it('the sweeper gives the key orphaned by the cancelled workflow a ReconcileWorkflow, which a person decides', async () => {
    const [orphan] = await store.list({ state: 'uncertain' });
    expect(orphan?.resource).toBe('doc:2');
    const key = orphan!.key;

    const report = await h.plugin.activities[libraryActivityNames.sweepAndReconcile]();
    expect(report.reconciling).toEqual([key]);
    const status = await h.waitForReconcile(key, 'waiting');
    expect(status).toMatchObject({ key, resource: 'doc:2', subscribers: [] });
    expect(status.effect).toBeUndefined();
    // A second sweep joins the running ReconcileWorkflow instead of starting another run.
    const { runId } = await h.reconcile(key).describe();
    await h.plugin.activities[libraryActivityNames.sweepAndReconcile]();
    expect((await h.reconcile(key).describe()).runId).toBe(runId);

    const resolution = await h.reconcile(key).executeUpdate(resolveUpdate, {
      args: [
        {
          applied: false,
          reason: 'cancelled before anything was written',
          by: 'ops',
          fence: (await store.inspect(key))!.fence,
        },
      ],
    });
    expect(resolution).toMatchObject({ applied: false, decidedBy: 'update' });
    expect((await store.inspect(key))?.state).toBe('free');
  });

  it('replays every recorded history without nondeterminism', async () => {
    expect(await h.replayAll()).toEqual([]);
  });
});
