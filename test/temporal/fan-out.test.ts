/** syncx inside Temporal: a workflow-side fan-out with a bound, and an in-flight bound per key inside a worker. */
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { MemoryStore } from '../../src/store/memory.js';
import { SideEffectFailureType, type SideEffectOutcome } from '../../src/workflows/index.js';
import { deferred, type Harness, startHarness, waitFor } from './harness.js';

let inFlight = 0;
let maxInFlight = 0;
const held = deferred();
let gatedEntered = deferred();

const effects = {
  echo: defineEffect({
    resource: (input: { i: number }) => `echo:${input.i}`,
    retrySafety: 'safe',
    apply: async (input: { i: number; fail?: boolean }) => {
      inFlight += 1;
      maxInFlight = Math.max(maxInFlight, inFlight);
      try {
        await new Promise((resolve) => setTimeout(resolve, 20 + ((input.i * 37) % 60)));
        if (input.fail) throw ApplicationFailure.nonRetryable(`item ${input.i} refused`, 'Refused');
        return { i: input.i };
      } finally {
        inFlight -= 1;
      }
    },
  }),
  callModel: defineEffect<ModelCall, { answered: string }>({
    resource: (input) => `call:${input.call}`,
    inFlight: { limit: 1, key: (input) => input.model },
    apply: async (input) => {
      if (input.hold) {
        gatedEntered.resolve();
        await held.promise;
      }
      return { answered: input.call };
    },
  }),
};

interface ModelCall {
  call: string;
  model: string;
  hold?: boolean;
}

const activity = { heartbeatTimeout: '5 seconds', startToCloseTimeout: '1 minute' };

describe('syncx in Temporal', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('fan-out', { store: new MemoryStore(), effects, ttlMs: 3_000 });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('fans out 50 guarded effects at most 5 in flight, results in call order, one failure kept in its slot', async () => {
    const inputs = Array.from({ length: 50 }, (_, i) => (i === 7 ? { i, fail: true } : { i }));
    const handle = await h.start('fanOut', ['echo', inputs, 5, activity]);
    const results = (await handle.result()) as PromiseSettledResult<
      SideEffectOutcome<{ i: number }>
    >[];
    expect(maxInFlight).toBeLessThanOrEqual(5);
    expect(maxInFlight).toBeGreaterThanOrEqual(2);
    expect(results).toHaveLength(50);
    results.forEach((slot, i) => {
      if (i === 7) {
        expect(slot.status).toBe('rejected');
        return;
      }
      expect(slot).toEqual({
        status: 'fulfilled',
        value: { outcome: 'applied', result: { i }, key: `${handle.workflowId}/echo/${i}` },
      });
    });
  });

  it('a full in-flight key turns the attempt away with the retryable SideEffectTooManyInFlight', async () => {
    gatedEntered = deferred();
    const first = await h.start('guarded', [
      'callModel',
      { call: 'c1', model: 'gpt', hold: true },
      activity,
    ]);
    await gatedEntered.promise;
    const other = await h.start('guarded', [
      'callModel',
      { call: 'c2', model: 'claude' },
      activity,
    ]);
    expect(((await other.result()) as SideEffectOutcome<unknown>).outcome).toBe('applied');

    const second = await h.start('guarded', ['callModel', { call: 'c3', model: 'gpt' }, activity]);
    await waitFor(async () => {
      const pending = (await second.describe()).raw.pendingActivities?.[0];
      const type = pending?.lastFailure?.applicationFailureInfo?.type;
      return (pending?.attempt ?? 0) >= 2 && type === SideEffectFailureType.TooManyInFlight
        ? true
        : undefined;
    }, 'the second gpt call to be turned away');
    held.resolve();
    expect(((await first.result()) as SideEffectOutcome<unknown>).outcome).toBe('applied');
    expect(((await second.result()) as SideEffectOutcome<unknown>).outcome).toBe('applied');
  });

  it('replays the fan-out histories deterministically', async () => {
    expect(await h.replayAll()).toEqual([]);
  });
});
