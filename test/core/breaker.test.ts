import { noopMetricMeter } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { BreakerGate, breakerPolicy } from '../../src/activities/breaker-gate.js';
import {
  BreakerOpenError,
  type BreakerPolicy,
  type BreakerStore,
  type Execution,
  Runner,
} from '../../src/core/index.js';
import { MemoryStore } from '../../src/store/memory.js';
import { bytes } from '../support/bytes.js';

const observer = { meter: noopMetricMeter, log: () => {} };
const policy: BreakerPolicy = {
  group: 'bank',
  threshold: 1,
  windowMs: 60_000,
  coolDownMs: 30_000,
  maxCoolDownMs: 60_000,
};

describe('Runner breaker: a step between the grant and the apply', () => {
  it('releases the key (free, resource free) and ends failed with the refusal; nothing applied', async () => {
    const store = new MemoryStore();
    const runner = new Runner(store, { ttlMs: 10_000 });
    let applied = 0;
    let recorded = 0;
    const refusal = new Error('paused');
    const execution = await runner.execute(
      { key: 'k', resource: 'r' },
      async () => {
        applied += 1;
        return { payload: bytes('x') };
      },
      {
        breaker: {
          admit: () => {
            throw refusal;
          },
          record: () => {
            recorded += 1;
          },
        },
      },
    );
    expect(execution).toEqual({ outcome: 'failed', error: refusal });
    expect(recorded).toBe(0);
    expect(applied).toBe(0);
    expect((await store.inspect('k'))?.state).toBe('free');
    expect((await store.acquire({ key: 'other', resource: 'r' }, 10_000)).outcome).toBe('granted');
  });

  it('is not asked for a replay: a done key still answers', async () => {
    const store = new MemoryStore();
    const runner = new Runner(store, { ttlMs: 10_000 });
    await runner.execute({ key: 'k', resource: 'r' }, async () => ({ payload: bytes('x') }));
    let asked = 0;
    const replay = await runner.execute(
      { key: 'k', resource: 'r' },
      async () => ({ payload: bytes('y') }),
      {
        breaker: {
          admit: () => {
            asked += 1;
            throw new Error('paused');
          },
          record: () => {
            asked += 1;
          },
        },
      },
    );
    expect(replay.outcome).toBe('replayed');
    expect(asked).toBe(0);
  });

  it('is told the end of every attempt it admitted, on each path out, and a throw of its own changes nothing', async () => {
    const store = new MemoryStore();
    const runner = new Runner(store, { ttlMs: 10_000 });
    const ends: Execution[] = [];
    const breaker = {
      admit: async () => {},
      record: (execution: Execution) => {
        ends.push(execution);
        throw new Error('breaker store down');
      },
    };
    const applied = await runner.execute(
      { key: 'a', resource: 'r' },
      async () => ({ payload: bytes('x') }),
      { breaker },
    );
    const uncertain = await runner.execute(
      { key: 'b', resource: 'r2' },
      async () => {
        throw new Error('timeout');
      },
      { breaker },
    );
    const prepareFailed = await runner.executeWith(
      { key: 'c', resource: 'r3' },
      {
        prepare: async () => {
          throw new Error('no quote');
        },
        apply: async () => ({ payload: bytes('y') }),
      },
      { breaker },
    );
    expect([applied.outcome, uncertain.outcome, prepareFailed.outcome]).toEqual([
      'applied',
      'uncertain',
      'failed',
    ]);
    expect(ends).toEqual([applied, uncertain, prepareFailed]);
  });
});

describe('BreakerGate attempt: the Runner step over the store', () => {
  it('refuses with BreakerOpenError while open: the key free, nothing applied', async () => {
    const store = new MemoryStore();
    const gate = new BreakerGate(store, 0);
    const runner = new Runner(store, { ttlMs: 10_000 });
    const timeout = async () => {
      throw new Error('timeout');
    };
    const first = await runner.execute({ key: 'k1', resource: 'r1' }, timeout, {
      breaker: gate.attempt(policy, 'k1', observer),
    });
    expect(first.outcome).toBe('uncertain');
    expect((await store.breaker('bank'))?.state).toBe('open');
    const refused = await runner.execute(
      { key: 'k2', resource: 'r2' },
      async () => ({ payload: bytes('x') }),
      { breaker: gate.attempt(policy, 'k2', observer) },
    );
    expect(refused.outcome).toBe('failed');
    if (refused.outcome === 'failed') expect(refused.error).toBeInstanceOf(BreakerOpenError);
    expect((await store.inspect('k2'))?.state).toBe('free');
  });

  it('remembers that its attempt was the half-open one: that attempt applied closes the breaker', async () => {
    const store = new MemoryStore();
    const gate = new BreakerGate(store, 0);
    const runner = new Runner(store, { ttlMs: 10_000 });
    const fast = { ...policy, group: 'fast', coolDownMs: 1, maxCoolDownMs: 1 };
    await runner.execute(
      { key: 'k1', resource: 'r1' },
      async () => {
        throw new Error('timeout');
      },
      { breaker: gate.attempt(fast, 'k1', observer) },
    );
    const opened = await store.breaker('fast');
    expect(opened?.state).toBe('open');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const probe = await runner.execute(
      { key: 'k2', resource: 'r2' },
      async () => ({ payload: bytes('x') }),
      { breaker: gate.attempt(fast, 'k2', observer) },
    );
    expect(probe.outcome).toBe('applied');
    expect((await store.breakerEvents('fast')).map(({ from, to }) => `${from}->${to}`)).toEqual([
      'closed->open',
      'open->half-open',
      'half-open->closed',
    ]);
  });
});

describe('BreakerGate', () => {
  it('trusts a closed answer for closedCacheMs (one read for callers asking at once), and forgets it once its own record opens the breaker', async () => {
    const store = new MemoryStore();
    let reads = 0;
    let admits = 0;
    const counting: BreakerStore = {
      admitAttempt: (...args) => {
        admits += 1;
        return store.admitAttempt(...args);
      },
      recordOutcome: (...args) => store.recordOutcome(...args),
      setBreaker: (...args) => store.setBreaker(...args),
      breaker: (group) => {
        reads += 1;
        return store.breaker(group);
      },
      breakers: () => store.breakers(),
      breakerEvents: (group) => store.breakerEvents(group),
    };
    const gate = new BreakerGate(counting, 60_000);
    const first = await Promise.all(
      ['a', 'b', 'c'].map((key) => gate.admit(policy, key, observer)),
    );
    expect(first.every((admission) => admission.admitted)).toBe(true);
    expect(gate.trustsClosed('bank')).toBe(true);
    expect((await gate.admit(policy, 'd', observer)).admitted).toBe(true);
    expect({ reads, admits }).toEqual({ reads: 1, admits: 0 });
    await gate.record(policy, { key: 'a', fence: 1, outcome: 'uncertain' }, observer);
    expect(gate.trustsClosed('bank')).toBe(false);
    const refused = await gate.admit(policy, 'e', observer);
    expect(refused.admitted).toBe(false);
    expect({ reads, admits }).toEqual({ reads: 2, admits: 1 });
    if (!refused.admitted) {
      const error = new BreakerOpenError(refused.record, refused.retryAt, refused.retryAfterMs);
      expect(error.code).toBe('BREAKER_OPEN');
      expect(error.message).toContain('breaker "bank" is open');
      expect(error.message).toContain('sideeffect breaker close bank --reason');
    }
  });

  it('closedCacheMs 0 asks the store for every attempt', async () => {
    const store = new MemoryStore();
    const gate = new BreakerGate(store, 0);
    await gate.admit(policy, 'a', observer);
    await store.setBreaker('bank', { state: 'open', reason: 'maintenance', by: 'ann' });
    expect((await gate.admit(policy, 'b', observer)).admitted).toBe(false);
  });
});

describe('breakerPolicy: an effect declaration and the plugin default', () => {
  it('is off unless declared, or the plugin says all; the group defaults to the effect name', () => {
    expect(breakerPolicy('charge', undefined)).toBeUndefined();
    expect(breakerPolicy('charge', true)).toMatchObject({ group: 'charge', threshold: 5 });
    expect(breakerPolicy('charge', undefined, { effects: 'all', threshold: 9 })).toMatchObject({
      group: 'charge',
      threshold: 9,
    });
    expect(breakerPolicy('charge', false, { effects: 'all' })).toBeUndefined();
    expect(breakerPolicy('refund', { group: 'bank' }, { coolDownMs: 5_000 })).toMatchObject({
      group: 'bank',
      coolDownMs: 5_000,
    });
  });

  it('refuses a bad threshold at worker start, naming the effect', () => {
    expect(() => breakerPolicy('charge', { threshold: 0 })).toThrow(
      expect.objectContaining({
        code: 'INVALID_ACTION',
        field: 'effects.charge.breaker.threshold',
      }),
    );
    expect(() => breakerPolicy('charge', { coolDownMs: 10, maxCoolDownMs: 5 })).toThrow(
      expect.objectContaining({ code: 'INVALID_ACTION' }),
    );
  });
});
