/** Outcome uncertain on the dev server: the calling workflow waits, and a probe, a CLI signal or an Update decides. */
import { WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { encodeJson } from '../../src/core/index.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { MemoryStore } from '../../src/store/memory.js';
import {
  resolveSignal,
  resolveUpdate,
  SideEffectFailureType,
  type SideEffectOutcome,
  searchAttributeKeys,
  statusQuery,
} from '../../src/workflows/index.js';
import { type Harness, Ledger, signalResolveWithCli, startHarness, waitFor } from './harness.js';

interface Order {
  account: string;
  amount: number;
  /** How the first apply of the key fails: after the downstream took the write, or before. */
  fail?: 'after-write' | 'before-write';
  /** The probe cannot tell. */
  blindProbe?: boolean;
}

const ledger = new Ledger();
const store = new MemoryStore();
const applies = new Map<string, number>();
const probeFences = new Map<string, number>();

async function applyOrder(input: Order, key: string, resource: string, fence: number) {
  const attempt = (applies.get(key) ?? 0) + 1;
  applies.set(key, attempt);
  if (input.fail === 'before-write' && attempt === 1) throw new Error('connection refused');
  const line = await ledger.write(resource, fence, key, input.amount);
  if (input.fail === 'after-write' && attempt === 1)
    throw new Error('connection reset after the write');
  return { receipt: `r-${line}` };
}

const effects = {
  order: defineEffect({
    resource: (input: Order) => `account:${input.account}`,
    apply: (input: Order, { key, lease }) => applyOrder(input, key, lease.resource, lease.fence),
  }),
  probedOrder: defineEffect({
    resource: (input: Order) => `account:${input.account}`,
    apply: (input: Order, { key, lease }) => applyOrder(input, key, lease.resource, lease.fence),
    // Reads through the sink with the fence it is given, so a paused old holder cannot write after "not applied".
    probe: async (input: Order, { key, resource, fence }) => {
      probeFences.set(key, fence);
      if (input.blindProbe) return undefined;
      return ledger.sink.readFenced(resource, fence, async () => {
        const line = ledger.entries.findIndex((entry) => entry.key === key);
        return line < 0
          ? { applied: false as const }
          : { applied: true as const, result: { receipt: `r-${line + 1}` } };
      });
    },
  }),
};

const activity = { heartbeatTimeout: '10 seconds', startToCloseTimeout: '1 minute' };

describe('reconciling an uncertain side effect', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('reconcile', { store, effects, ttlMs: 5_000 });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('waits for a person; a resolve signal sent with the temporal CLI (applied) returns the recorded result and never re-applies', async () => {
    const handle = await h.start('guardedTwice', [
      'order',
      { account: 'u1', amount: 7, fail: 'after-write' },
      { ...activity, step: 'pay' },
    ]);
    const key = `${handle.workflowId}/pay`;
    const status = await h.waitForReconcile(key, 'waiting');
    expect(status).toMatchObject({
      key,
      resource: 'account:u1',
      rejected: [],
      subscribers: [handle.workflowId],
    });
    expect(status.reason).toContain('connection reset after the write');
    expect((await store.inspect(key))?.state).toBe('uncertain');

    // Operators find it by search attribute.
    const reconcile = h.reconcile(key);
    const waiting = await reconcile.describe();
    expect(waiting.typedSearchAttributes.get(searchAttributeKeys.state)).toBe('waiting');
    expect(waiting.typedSearchAttributes.get(searchAttributeKeys.key)).toBe(key);
    expect(waiting.typedSearchAttributes.get(searchAttributeKeys.resource)).toBe('account:u1');
    await waitFor(async () => {
      for await (const info of h.client.workflow.list({
        query: `SideEffectState="waiting" AND SideEffectKey="${key}"`,
      })) {
        if (info.workflowId === reconcile.workflowId) return true;
      }
      return undefined;
    }, 'the visibility query to list the waiting ReconcileWorkflow');

    await signalResolveWithCli(
      key,
      JSON.stringify({
        applied: true,
        result: { receipt: 'r-checked' },
        reason: 'found in the ledger',
        by: 'ops@example.com',
        fence: status.fence,
      }),
    );

    const [first, second] = (await handle.result()) as SideEffectOutcome<unknown>[];
    expect(first).toEqual({ outcome: 'reconciled', result: { receipt: 'r-checked' }, key });
    expect(second).toEqual({ outcome: 'replayed', result: { receipt: 'r-checked' }, key });
    expect(applies.get(key)).toBe(1);
    expect(ledger.byKey(key)).toHaveLength(1);
    expect(await reconcile.result()).toEqual({
      key,
      applied: true,
      result: { receipt: 'r-checked' },
      reason: 'found in the ledger',
      by: 'ops@example.com',
      decidedBy: 'signal',
    });
    expect((await reconcile.describe()).typedSearchAttributes.get(searchAttributeKeys.state)).toBe(
      'resolved',
    );
  });

  it('a resolve signal saying not applied runs the effect again, once', async () => {
    const handle = await h.start('guarded', [
      'order',
      { account: 'u2', amount: 3, fail: 'before-write' },
      activity,
    ]);
    const key = `${handle.workflowId}/order`;
    const { fence } = await h.waitForReconcile(key, 'waiting');
    expect(ledger.byKey(key)).toHaveLength(0);
    await signalResolveWithCli(
      key,
      `{"applied": false, "reason": "not in the ledger", "by": "ops", "fence": ${fence}}`,
    );

    const outcome = (await handle.result()) as SideEffectOutcome<{ receipt: string }>;
    expect(outcome.outcome).toBe('applied');
    expect(applies.get(key)).toBe(2);
    expect(ledger.byKey(key)).toHaveLength(1);
    expect(((await h.reconcile(key).result()) as ReconcileResolution).decidedBy).toBe('signal');
  });

  it('a probe that finds the write resolves it as applied without a person', async () => {
    const handle = await h.start('guarded', [
      'probedOrder',
      { account: 'u3', amount: 4, fail: 'after-write' },
      activity,
    ]);
    const key = `${handle.workflowId}/probedOrder`;
    const outcome = (await handle.result()) as SideEffectOutcome<{ receipt: string }>;
    const line = ledger.entries.findIndex((entry) => entry.key === key) + 1;
    expect(outcome).toEqual({ outcome: 'reconciled', result: { receipt: `r-${line}` }, key });
    expect(applies.get(key)).toBe(1);
    expect(ledger.byKey(key)).toHaveLength(1);
    expect(await h.reconcile(key).result()).toMatchObject({
      applied: true,
      decidedBy: 'probe',
      by: 'probe:probedOrder',
    });
  });

  it('a probe that finds nothing resolves it as not applied; the effect runs again once', async () => {
    const handle = await h.start('guarded', [
      'probedOrder',
      { account: 'u4', amount: 4, fail: 'before-write' },
      activity,
    ]);
    const key = `${handle.workflowId}/probedOrder`;
    expect(((await handle.result()) as SideEffectOutcome<unknown>).outcome).toBe('applied');
    expect(applies.get(key)).toBe(2);
    expect(ledger.byKey(key)).toHaveLength(1);
    expect(await h.reconcile(key).result()).toMatchObject({ applied: false, decidedBy: 'probe' });
    // The probe read above the failed attempt's fence 1; the re-run's grant (fence 2) writes at that mark.
    expect(probeFences.get(key)).toBe(2);
    expect(ledger.byKey(key)[0]?.fence).toBe(2);
    expect(ledger.sink.highestFence('account:u4')).toBe(2);
  });

  it('malformed resolve signals are recorded and ignored; the Update validator rejects bad input; a valid Update decides', async () => {
    const handle = await h.start('guarded', [
      'probedOrder',
      { account: 'u5', amount: 9, fail: 'before-write', blindProbe: true },
      activity,
    ]);
    const key = `${handle.workflowId}/probedOrder`;
    await h.waitForReconcile(key, 'waiting');
    const reconcile = h.reconcile(key);

    await signalResolveWithCli(key, '"applied"');
    await signalResolveWithCli(key, '{"applied": "yes", "reason": "looked"}');
    await reconcile.signal(resolveSignal, { applied: true } as never);
    await reconcile.signal(resolveSignal, { applied: false, reason: '   ' });
    await reconcile.signal(resolveSignal, {
      applied: true,
      results: { receipt: 'x' },
      reason: 'typo',
    } as never);

    const status = await waitFor(async () => {
      const s = await reconcile.query(statusQuery);
      return s.rejected.length === 5 ? s : undefined;
    }, 'five rejected signals');
    expect(status.state).toBe('waiting');
    expect(status.resolution).toBeUndefined();
    expect(status.rejected.map((r) => r.input)).toEqual([
      'applied',
      { applied: 'yes', reason: 'looked' },
      { applied: true },
      { applied: false, reason: '   ' },
      { applied: true, results: { receipt: 'x' }, reason: 'typo' },
    ]);
    expect(status.rejected.map((r) => r.error)).toEqual([
      expect.stringContaining('one JSON object'),
      expect.stringContaining('invalid applied: must be a boolean'),
      expect.stringContaining('invalid reason: must be a string'),
      expect.stringContaining('invalid reason: must not be blank'),
      expect.stringContaining('unknown field(s) results'),
    ]);
    expect((await handle.describe()).status.name).toBe('RUNNING');
    expect(applies.get(key)).toBe(1);

    const rejected = await reconcile
      .executeUpdate(resolveUpdate, { args: [{ applied: 'no', reason: 'x' } as never] })
      .catch((e: unknown) => e);
    expect(rejected).toBeInstanceOf(WorkflowUpdateFailedError);
    expect(String((rejected as WorkflowUpdateFailedError).cause?.message)).toContain(
      'invalid applied: must be a boolean',
    );
    expect((await reconcile.query(statusQuery)).state).toBe('waiting');

    // An Update naming no attempt is refused too, with the verdict to send once one is named.
    const unnamed = await reconcile
      .executeUpdate(resolveUpdate, { args: [{ applied: false, reason: 'x', by: 'test' }] })
      .catch((e: unknown) => e);
    expect(unnamed).toBeInstanceOf(WorkflowUpdateFailedError);
    expect(String((unnamed as WorkflowUpdateFailedError).cause?.message)).toMatch(
      /^names no attempt: add "fence": the attempt you checked \(this run judges attempt 1/,
    );
    expect((await reconcile.query(statusQuery)).rejected.at(-1)).toMatchObject({
      input: { applied: false, reason: 'x', by: 'test' },
      instead: {
        applied: false,
        reason: 'x',
        by: 'test',
        fence: '<the attempt you checked: 1 is the latest>',
      },
    });

    const resolution = await reconcile.executeUpdate(resolveUpdate, {
      args: [{ applied: false, reason: 'checked the ledger', by: 'test', fence: 1 }],
    });
    expect(resolution).toEqual({
      key,
      applied: false,
      reason: 'checked the ledger',
      by: 'test',
      decidedBy: 'update',
    });
    expect(((await handle.result()) as SideEffectOutcome<unknown>).outcome).toBe('applied');
    expect(applies.get(key)).toBe(2);
    expect(ledger.byKey(key)).toHaveLength(1);

    // The closed ReconcileWorkflow still answers the status query with the verdict that stands.
    const late = await reconcile.query(statusQuery);
    expect(late.resolution).toEqual(resolution);
  });

  it('a verdict judges one attempt: after the key was re-applied and became uncertain again, the old attempt is refused', async () => {
    const order: Order = { account: 'u9', amount: 4, fail: 'before-write', blindProbe: true };
    const handle = await h.start('guarded', ['probedOrder', order, activity]);
    const key = `${handle.workflowId}/probedOrder`;
    const status = await h.waitForReconcile(key, 'waiting');
    const attempt = (await store.inspect(key))!.fence;
    expect(status.fence).toBe(attempt);
    const reconcile = h.reconcile(key);

    // Another decider, outside this workflow, resolves attempt 1; the key is re-applied and its
    // response lost: attempt 2, which this ReconcileWorkflow has never looked at.
    const action = { key, resource: status.resource, payload: encodeJson(order).payload };
    await store.resolveUncertain(key, { applied: false, reason: 'elsewhere', fence: attempt });
    const regrant = await store.acquire(action, 5_000, { applying: true });
    if (regrant.outcome !== 'granted') throw new Error(regrant.outcome);
    await store.markUncertain(action, regrant.lease, 'response lost again');

    // A verdict without a fence is refused for naming no attempt; one saying "any attempt" is
    // attached to this run's attempt and refused as stale.
    await reconcile.signal(resolveSignal, { applied: false, reason: 'looked at attempt 1' });
    await reconcile.signal(resolveSignal, {
      applied: false,
      reason: 'nothing anywhere',
      attempt: 'any',
    });
    const refused = await waitFor(async () => {
      const s = await reconcile.query(statusQuery);
      return s.rejected.length === 2 ? s : undefined;
    }, 'the two signals in the rejected entries');
    expect(refused.rejected[0]?.error).toMatch(/^names no attempt/);
    expect(refused.rejected[1]?.error).toMatch(
      /the attempt with fence 2 of ".*" is the uncertain one now; your verdict judged the attempt with fence 1/,
    );
    expect(refused.state).toBe('waiting');

    const stale = await reconcile
      .executeUpdate(resolveUpdate, {
        args: [{ applied: false, reason: 'also attempt 1', fence: attempt }],
      })
      .catch((e: unknown) => e);
    expect(stale).toBeInstanceOf(WorkflowUpdateFailedError);
    const cause = (stale as WorkflowUpdateFailedError).cause;
    expect(cause).toBeInstanceOf(ApplicationFailure);
    expect((cause as ApplicationFailure).type).toBe(SideEffectFailureType.StaleVerdict);
    expect((await store.inspect(key))?.state).toBe('uncertain');

    // A verdict naming the current attempt decides it.
    const resolution = await reconcile.executeUpdate(resolveUpdate, {
      args: [{ applied: false, reason: 'checked attempt 2', fence: regrant.lease.fence }],
    });
    expect(resolution).toMatchObject({ applied: false, decidedBy: 'update' });
    expect(((await handle.result()) as SideEffectOutcome<unknown>).outcome).toBe('applied');
    expect(ledger.byKey(key)).toHaveLength(1);
  });

  it('several uncertain calls in one workflow each get their own resolution', async () => {
    const handle = await h.start('guardedParallel', [
      'order',
      [
        { step: 'a', input: { account: 'p-a', amount: 1, fail: 'after-write' } },
        { step: 'b', input: { account: 'p-b', amount: 2, fail: 'after-write' } },
      ],
      activity,
    ]);
    const keyA = `${handle.workflowId}/a`;
    const keyB = `${handle.workflowId}/b`;
    const { fence: fenceA } = await h.waitForReconcile(keyA, 'waiting');
    const { fence: fenceB } = await h.waitForReconcile(keyB, 'waiting');
    await h.reconcile(keyB).executeUpdate(resolveUpdate, {
      args: [{ applied: true, result: 'B', reason: 'seen', fence: fenceB! }],
    });
    await h.reconcile(keyA).executeUpdate(resolveUpdate, {
      args: [{ applied: true, result: 'A', reason: 'seen', fence: fenceA! }],
    });
    const outcomes = (await handle.result()) as SideEffectOutcome<string>[];
    expect(outcomes.map((o) => [o.key, o.result])).toEqual([
      [keyA, 'A'],
      [keyB, 'B'],
    ]);
    expect(applies.get(keyA)).toBe(1);
    expect(applies.get(keyB)).toBe(1);
  });

  it("onUncertain 'throw' fails the workflow with a typed SideEffectOutcomeUncertain instead of waiting", async () => {
    const handle = await h.start('guarded', [
      'order',
      { account: 'u7', amount: 1, fail: 'after-write' },
      { ...activity, onUncertain: 'throw' },
    ]);
    const key = `${handle.workflowId}/order`;
    const error = (await handle.result().catch((e: unknown) => e)) as WorkflowFailedError;
    expect(error).toBeInstanceOf(WorkflowFailedError);
    const failure = error.cause as ApplicationFailure;
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure.type).toBe(SideEffectFailureType.OutcomeUncertain);
    expect(failure.details?.[0]).toMatchObject({ key, resource: 'account:u7' });
    expect((await store.inspect(key))?.state).toBe('uncertain');
  });

  it('replays every recorded history (callers and ReconcileWorkflows) without nondeterminism', async () => {
    expect(await h.replayAll()).toEqual([]);
  });
});
