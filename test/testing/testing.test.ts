/**
 * `sideeffect/testing` against the shared dev server: each scripted outcome reaches the workflow
 * as the real one would (applied, uncertain then a verdict, not applied, a definite failure),
 * a held resource makes the call contended until it lapses, and TestStore shows what it holds.
 */
import { WorkflowFailedError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { resolve, scriptEffect, TestStore, waitForReconcile } from '../../src/testing/index.js';
import type { SideEffectOutcome } from '../../src/workflows/index.js';
import { type Harness, startHarness, waitFor } from '../temporal/harness.js';

interface Mail {
  to: string;
}

const store = new TestStore();
const effects = {
  mailed: scriptEffect<Mail, { id: string }>([{ applied: { id: 'm-1' } }], {
    resource: (input) => `inbox:${input.to}`,
  }),
  lost: scriptEffect<Mail, { id: string }>(['uncertain', { applied: { id: 'm-2' } }]),
  bounced: scriptEffect<Mail, { id: string }>(['not applied']),
  /** Stands in for a real effect whose verdicts must carry `{ id }`. */
  checked: scriptEffect<Mail, { id: string }>(['uncertain'], {
    like: defineEffect({
      resource: (input: Mail) => `inbox:${input.to}`,
      apply: async () => ({ id: 'real' }),
      result: (result) =>
        typeof (result as { id?: unknown } | null)?.id === 'string' || 'needs { id }',
    }),
  }),
  declined: scriptEffect<Mail, { id: string }>([
    { definiteFailure: 'MailboxFull', details: [{ quota: 10 }] },
  ]),
};

describe('sideeffect/testing', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('testing', { store, effects, ttlMs: 5_000 });
  });
  afterAll(() => h?.close());

  it('an applied attempt returns its result, and the store holds it decoded', async () => {
    const run = await h.start('guarded', ['mailed', { to: 'a' }]);
    const outcome = (await run.result()) as SideEffectOutcome<unknown>;
    expect(outcome).toMatchObject({ outcome: 'applied', result: { id: 'm-1' } });
    expect(await store.key(outcome.key)).toMatchObject({
      state: 'done',
      resource: 'inbox:a',
      result: { id: 'm-1' },
    });
    expect(effects.mailed.calls).toEqual([{ input: { to: 'a' }, key: outcome.key, fence: 1 }]);
  });

  it('uncertain waits for a verdict; "not applied" runs the effect again, which applies', async () => {
    const run = await h.start('guarded', ['lost', { to: 'b' }]);
    const key = `${run.workflowId}/lost`;
    const status = await waitForReconcile(h.client, key);
    expect(status).toMatchObject({ key, effect: 'lost', state: 'waiting' });
    expect(await store.key(key)).toMatchObject({ state: 'uncertain' });
    const resolution = await resolve(h.client, key, {
      applied: false,
      reason: 'no mail in the outbox',
      by: 'test',
    });
    expect(resolution).toMatchObject({ key, applied: false, decidedBy: 'update' });
    expect(await run.result()).toMatchObject({ outcome: 'applied', result: { id: 'm-2' } });
    expect(effects.lost.calls.map((call) => call.key)).toEqual([key, key]);
  });

  it("like: keeps the real effect's result check, so a verdict it refuses is refused", async () => {
    const run = await h.start('guarded', ['checked', { to: 'f' }]);
    const key = `${run.workflowId}/checked`;
    await waitForReconcile(h.client, key);
    await expect(
      resolve(h.client, key, { applied: true, result: null, reason: 'seen', by: 'test' }),
    ).rejects.toMatchObject({ cause: { message: expect.stringMatching(/needs \{ id \}/) } });
    expect(await store.key(key)).toMatchObject({ state: 'uncertain' });
    await resolve(h.client, key, {
      applied: true,
      result: { id: 'm-3' },
      reason: 'seen',
      by: 'test',
    });
    expect(await run.result()).toMatchObject({ outcome: 'reconciled', result: { id: 'm-3' } });
  });

  it('"not applied" and a definite failure fail the call non-retryable and free the key', async () => {
    for (const [effect, type] of [
      ['bounced', 'SideEffectNotApplied'],
      ['declined', 'MailboxFull'],
    ] as const) {
      const run = await h.start('guarded', [effect, { to: 'c' }]);
      const failure = await run.result().catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(WorkflowFailedError);
      expect((failure as WorkflowFailedError).cause?.cause).toMatchObject({
        type,
        nonRetryable: true,
        ...(effect === 'declined' ? { details: [{ quota: 10 }] } : {}),
      });
      expect(await store.key(`${run.workflowId}/${effect}`)).toMatchObject({ state: 'free' });
      expect(effects[effect].calls).toHaveLength(1);
    }
  });

  it('a held resource makes the call contended until the hold lapses', async () => {
    await store.holdResource('inbox:e', 4_000);
    const run = await h.start('guarded', ['mailed', { to: 'e' }]);
    const key = `${run.workflowId}/mailed`;
    // The workflow's pending attempt failed contended (retried by Temporal); apply never ran.
    await waitFor(async () => {
      const { raw } = await run.describe();
      const failure = raw.pendingActivities?.[0]?.lastFailure;
      return failure?.applicationFailureInfo?.type === 'SideEffectContended' ? true : undefined;
    }, 'a contended attempt');
    expect(effects.mailed.calls.some((call) => call.key === key)).toBe(false);
    expect(await run.result()).toMatchObject({ outcome: 'applied', result: { id: 'm-1' } });
    expect(effects.mailed.calls.filter((call) => call.key === key)).toHaveLength(1);
  });
});
