import { describe, expect, it } from 'vitest';
import {
  type Action,
  ContendedError,
  FenceStaleError,
  InvalidActionError,
  LeaseLostError,
  markNotApplied,
  NoStoreError,
  NotAppliedError,
  OutcomeUncertainError,
  type Result,
  Runner,
} from '../../src/core/index.js';
import { MemoryFencedSink, MemoryStore } from '../../src/store/memory.js';
import { bytes, text } from '../support/bytes.js';
import { storeWith } from '../support/store-with.js';

const TTL = 1_000;

function setup() {
  let clock = 1_700_000_000_000;
  const store = new MemoryStore({ now: () => clock });
  return {
    store,
    runner: new Runner(store, { ttlMs: TTL }),
    advance: (ms: number) => {
      clock += ms;
    },
  };
}

const ok = (value: string) => async (): Promise<Result> => ({ payload: bytes(value) });

let n = 0;
function action(overrides: Partial<Action> = {}): Action {
  n += 1;
  return { key: `key-${n}`, resource: `res-${n}`, ...overrides };
}

describe('Runner.execute', () => {
  it('applies once, then replays the stored result without calling apply', async () => {
    const { runner } = setup();
    const a = action();
    let calls = 0;
    const apply = async () => {
      calls += 1;
      return { payload: bytes('receipt-1') };
    };
    const first = await runner.execute(a, apply);
    expect(first.outcome).toBe('applied');
    const second = await runner.execute(a, apply);
    expect(second).toEqual({ outcome: 'replayed', result: { payload: bytes('receipt-1') } });
    expect(calls).toBe(1);
  });

  it('hands apply the lease and its fence', async () => {
    const { runner } = setup();
    let seen = 0;
    await runner.execute(action(), async ({ lease }) => {
      seen = lease.fence;
      return { payload: bytes('') };
    });
    expect(seen).toBe(1);
  });

  it('contended: another holder is live; nothing runs, the time left is reported', async () => {
    const { store, runner } = setup();
    const a = action();
    await store.acquire({ key: 'other', resource: a.resource }, TTL);
    let called = false;
    const execution = await runner.execute(a, async () => {
      called = true;
      return { payload: bytes('') };
    });
    expect(execution).toEqual({ outcome: 'contended', retryAfterMs: TTL });
    expect(called).toBe(false);
  });

  it('apply failed + safe: released, failed, and a retry applies', async () => {
    const { store, runner } = setup();
    const a = action({ retrySafety: 'safe' });
    const failed = await runner.execute(a, async () => {
      throw new Error('downstream 503');
    });
    expect(failed.outcome).toBe('failed');
    expect((await store.inspect(a.key))?.state).toBe('free');
    expect((await runner.execute(a, ok('second try'))).outcome).toBe('applied');
  });

  it.each(['unknown', 'unsafe'] as const)(
    'apply failed + %s: uncertain with the cause, key blocked, resource free',
    async (retrySafety) => {
      const { store, runner } = setup();
      const a = action(retrySafety === 'unknown' ? {} : { retrySafety });
      const cause = new Error('socket hang up');
      const execution = await runner.execute(a, async () => {
        throw cause;
      });
      expect(execution.outcome).toBe('uncertain');
      if (execution.outcome !== 'uncertain') return;
      expect(execution.error).toBeInstanceOf(OutcomeUncertainError);
      expect(execution.error.cause).toBe(cause);
      expect(execution.reason).toBe('apply failed: socket hang up');
      let called = false;
      const retry = await runner.execute(a, async () => {
        called = true;
        return { payload: bytes('') };
      });
      expect(retry.outcome).toBe('uncertain');
      expect(called).toBe(false);
      expect((await store.acquire({ key: 'next', resource: a.resource }, TTL)).outcome).toBe(
        'granted',
      );
    },
  );

  it.each(['unknown', 'unsafe', 'safe'] as const)(
    'apply refused with NotAppliedError (%s): released, failed definite, nobody paged, a retry applies',
    async (retrySafety) => {
      const { store, runner } = setup();
      const a = action({ retrySafety });
      const refusal = new NotAppliedError('card declined', {
        type: 'CardDeclined',
        details: [{ code: 51 }],
      });
      const execution = await runner.execute(a, async () => {
        throw refusal;
      });
      expect(execution).toEqual({ outcome: 'failed', error: refusal, definite: true });
      expect((await store.inspect(a.key))?.state).toBe('free');
      expect((await store.events(a.key)).map((event) => event.to)).toEqual(['applying', 'free']);
      expect((await runner.execute(a, ok('paid'))).outcome).toBe('applied');
    },
  );

  it.each(['unknown', 'unsafe'] as const)(
    'a write the sink rolled back before COMMIT (%s): released, failed retryable (not definite), a retry applies',
    async (retrySafety) => {
      const { store, runner } = setup();
      const a = action({ retrySafety });
      const lost = markNotApplied(new Error('terminating connection due to administrator command'));
      const execution = await runner.execute(a, async () => {
        throw lost;
      });
      expect(execution).toEqual({ outcome: 'failed', error: lost });
      expect((await store.inspect(a.key))?.state).toBe('free');
      expect((await runner.execute(a, ok('paid'))).outcome).toBe('applied');
    },
  );

  it('isDefinite lists which other apply errors are refusals; the rest stay uncertain', async () => {
    const { store, runner } = setup();
    class CardDeclined extends Error {
      override name = 'CardDeclined';
    }
    const isDefinite = (error: unknown) => error instanceof Error && error.name === 'CardDeclined';
    const declined = action();
    const refused = await runner.execute(
      declined,
      async () => {
        throw new CardDeclined('insufficient funds');
      },
      { isDefinite },
    );
    expect(refused).toMatchObject({ outcome: 'failed', definite: true });
    expect((await store.inspect(declined.key))?.state).toBe('free');
    const timedOut = action();
    const unknown = await runner.execute(
      timedOut,
      async () => {
        throw new Error('timeout');
      },
      { isDefinite },
    );
    expect(unknown.outcome).toBe('uncertain');
    expect((await store.inspect(timedOut.key))?.state).toBe('uncertain');
  });

  it('complete failed: uncertain, never applied', async () => {
    const { store } = setup();
    const failingComplete = storeWith(store, {
      complete: async () => {
        throw new Error('connection reset');
      },
    });
    const runner = new Runner(failingComplete, { ttlMs: TTL });
    const a = action();
    const execution = await runner.execute(a, ok('charged'));
    expect(execution.outcome).toBe('uncertain');
    if (execution.outcome === 'uncertain')
      expect(execution.reason).toBe('complete failed: connection reset');
    expect((await store.inspect(a.key))?.state).toBe('uncertain');
  });

  it('store failure before any outcome is a rejection, never a false outcome', async () => {
    const { store } = setup();
    const down = storeWith(store, {
      acquire: async () => {
        throw new Error('ECONNREFUSED');
      },
    });
    await expect(new Runner(down, { ttlMs: TTL }).execute(action(), ok('x'))).rejects.toThrow(
      'ECONNREFUSED',
    );
  });

  it('invalid input and a missing store are typed errors', async () => {
    const { store } = setup();
    await expect(new Runner(store, { ttlMs: 0 }).execute(action(), ok('x'))).rejects.toBeInstanceOf(
      InvalidActionError,
    );
    await expect(
      new Runner(store, { ttlMs: TTL }).execute(action({ key: '' }), ok('x')),
    ).rejects.toMatchObject({
      code: 'INVALID_ACTION',
      field: 'key',
    });
    await expect(
      new Runner(undefined, { ttlMs: TTL }).execute(action(), ok('x')),
    ).rejects.toBeInstanceOf(NoStoreError);
  });
});

describe('Runner.executeWith', () => {
  it('prepare failed: released, failed, nothing applied, safe to retry', async () => {
    const { store, runner } = setup();
    const a = action();
    let applied = false;
    const execution = await runner.executeWith(a, {
      prepare: async () => {
        throw new Error('price lookup failed');
      },
      apply: async () => {
        applied = true;
        return { payload: bytes('') };
      },
    });
    expect(execution.outcome).toBe('failed');
    expect(applied).toBe(false);
    expect((await store.inspect(a.key))?.state).toBe('free');
  });

  it('passes what prepare made to apply, with the holder check in between', async () => {
    const { store, runner } = setup();
    const a = action();
    const execution = await runner.executeWith(a, {
      prepare: async () => 42,
      apply: async (prepared) => {
        expect((await store.inspect(a.key))?.state).toBe('applying');
        return { payload: bytes(String(prepared)) };
      },
    });
    expect(execution.outcome === 'applied' && text(execution.result.payload)).toBe('42');
  });

  it('a paused holder: prepare outlives the TTL, another worker takes over, the first must not apply', async () => {
    const { store, runner, advance } = setup();
    const sink = new MemoryFencedSink();
    const ledger: string[] = [];
    const a = action();
    const secondWorker = new Runner(store, { ttlMs: TTL });
    let firstApplied = false;
    const first = await runner.executeWith(a, {
      prepare: async () => {
        advance(TTL + 1);
        const takeover = await secondWorker.execute(a, async ({ lease }) =>
          sink.writeFenced(a.resource, lease.fence, async () => {
            ledger.push(`second@${lease.fence}`);
            return { payload: bytes('second') };
          }),
        );
        expect(takeover.outcome).toBe('applied');
      },
      apply: async () => {
        firstApplied = true;
        return { payload: bytes('first') };
      },
    });
    expect(first.outcome).toBe('contended');
    if (first.outcome === 'contended') expect(first.error).toBeInstanceOf(LeaseLostError);
    expect(firstApplied).toBe(false);
    expect(ledger).toEqual(['second@2']);
    expect((await runner.execute(a, ok('again'))).outcome).toBe('replayed');
  });

  it('a late write with a stale fence is rejected downstream while the new holder stands', async () => {
    const { store, advance } = setup();
    const sink = new MemoryFencedSink();
    const ledger: string[] = [];
    const slow = action({ key: 'slow' });
    const fast = { key: 'fast', resource: slow.resource };
    const stale = await store.acquire(slow, TTL, { applying: true });
    if (stale.outcome !== 'granted') throw new Error('setup');
    advance(TTL + 1);
    const fresh = await new Runner(store, { ttlMs: TTL }).execute(fast, async ({ lease }) =>
      sink.writeFenced(fast.resource, lease.fence, async () => {
        ledger.push('fast');
        return { payload: bytes('fast') };
      }),
    );
    expect(fresh.outcome).toBe('applied');
    await expect(
      sink.writeFenced(slow.resource, stale.lease.fence, async () => {
        ledger.push('slow');
      }),
    ).rejects.toBeInstanceOf(FenceStaleError);
    expect(ledger).toEqual(['fast']);
    expect(sink.highestFence(slow.resource)).toBe(2);
    expect((await store.inspect('slow'))?.state).toBe('uncertain');
  });
});

describe('MemoryFencedSink.readFenced', () => {
  it('fences out a paused holder before a probe reads, and never lowers the mark', async () => {
    const sink = new MemoryFencedSink();
    const ledger: number[] = [];
    expect(await sink.readFenced('card', 2, async () => [...ledger])).toEqual([]);
    await expect(sink.writeFenced('card', 1, async () => ledger.push(1))).rejects.toBeInstanceOf(
      FenceStaleError,
    );
    await sink.writeFenced('card', 2, async () => ledger.push(2));
    await sink.readFenced('card', 1, async () => undefined);
    expect(sink.highestFence('card')).toBe(2);
    expect(ledger).toEqual([2]);
  });
});

describe('lease keep-alive during apply', () => {
  it('renews every ttl/3 so a long apply is not taken over, and reports each renewal', async () => {
    const store = new MemoryStore();
    const runner = new Runner(store, { ttlMs: 60 });
    const a = action();
    let renewals = 0;
    const execution = await runner.execute(
      a,
      async () => {
        await new Promise((resolve) => setTimeout(resolve, 200));
        expect((await store.acquire({ key: 'intruder', resource: a.resource }, 60)).outcome).toBe(
          'contended',
        );
        return { payload: bytes('long') };
      },
      { onRenewed: () => renewals++ },
    );
    expect(execution.outcome).toBe('applied');
    expect(renewals).toBeGreaterThanOrEqual(3);
  });

  it('renews during a slow prepare too, so the holder check still passes', async () => {
    const store = new MemoryStore();
    const runner = new Runner(store, { ttlMs: 60 });
    const a = action();
    let renewals = 0;
    const execution = await runner.executeWith(
      a,
      {
        prepare: async () => {
          await new Promise((resolve) => setTimeout(resolve, 200));
          expect((await store.acquire({ key: 'intruder', resource: a.resource }, 60)).outcome).toBe(
            'contended',
          );
        },
        apply: async () => ({ payload: bytes('after a slow prepare') }),
      },
      { onRenewed: () => renewals++ },
    );
    expect(execution.outcome).toBe('applied');
    expect(renewals).toBeGreaterThanOrEqual(3);
  });

  it('a lease lost during prepare aborts it and ends contended, nothing applied', async () => {
    let clock = 1_700_000_000_000;
    const store = new MemoryStore({ now: () => clock });
    const runner = new Runner(store, { ttlMs: 30 });
    const a = action();
    let applied = false;
    const execution = await runner.executeWith(a, {
      prepare: async ({ signal }) => {
        clock += 31;
        await store.acquire({ key: 'taker', resource: a.resource }, 30_000);
        await new Promise((_, reject) =>
          signal.addEventListener('abort', () => reject(signal.reason), { once: true }),
        );
      },
      apply: async () => {
        applied = true;
        return { payload: bytes('') };
      },
    });
    expect(execution.outcome).toBe('contended');
    if (execution.outcome === 'contended') expect(execution.error).toBeInstanceOf(LeaseLostError);
    expect(applied).toBe(false);
    expect((await store.inspect(a.key))?.state).toBe('free');
  });

  it('aborts the apply with LeaseLostError when the lease is taken over mid-apply', async () => {
    let clock = 1_700_000_000_000;
    const store = new MemoryStore({ now: () => clock });
    const runner = new Runner(store, { ttlMs: 30 });
    const a = action();
    const execution = await runner.execute(a, async ({ signal }) => {
      clock += 31;
      await store.acquire({ key: 'taker', resource: a.resource }, 30_000);
      await new Promise((_resolve, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      });
      return { payload: bytes('never') };
    });
    expect(execution.outcome).toBe('uncertain');
    if (execution.outcome === 'uncertain')
      expect(execution.error.cause).toBeInstanceOf(LeaseLostError);
  });

  it('aborts the apply when a renew hangs unanswered for a whole TTL (a partition that resets nothing)', async () => {
    class Partitioned extends MemoryStore {
      partitioned = false;
      override renew(...args: Parameters<MemoryStore['renew']>) {
        return this.partitioned ? new Promise<never>(() => {}) : super.renew(...args);
      }
    }
    const store = new Partitioned();
    const runner = new Runner(store, { ttlMs: 60 });
    let reason: unknown;
    const execution = await runner.execute(action(), async ({ signal }) => {
      store.partitioned = true;
      reason = await new Promise((resolve) => {
        signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
      });
      throw reason;
    });
    expect(reason).toBeInstanceOf(LeaseLostError);
    expect((reason as LeaseLostError).cause).toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect(execution.outcome).toBe('uncertain');
  });

  it('the caller signal aborts the apply too', async () => {
    const { runner } = setup();
    const controller = new AbortController();
    const execution = runner.execute(
      action({ retrySafety: 'safe' }),
      async ({ signal }) => {
        controller.abort(new Error('activity cancelled'));
        throw signal.reason;
      },
      { signal: controller.signal },
    );
    expect(await execution).toMatchObject({
      outcome: 'failed',
      error: new Error('activity cancelled'),
    });
  });
});

describe('Runner.run and resolve', () => {
  it('run returns the result for applied and replayed', async () => {
    const { runner } = setup();
    const a = action();
    expect(text((await runner.run(a, ok('r1'))).payload)).toBe('r1');
    expect(text((await runner.run(a, ok('r2'))).payload)).toBe('r1');
  });

  it('run throws on contended, uncertain and failed', async () => {
    const { store, runner } = setup();
    const busy = action();
    await store.acquire({ key: 'holder', resource: busy.resource }, TTL);
    await expect(runner.run(busy, ok('x'))).rejects.toBeInstanceOf(ContendedError);
    const doubtful = action();
    await runner.execute(doubtful, async () => {
      throw new Error('lost');
    });
    await expect(runner.run(doubtful, ok('x'))).rejects.toBeInstanceOf(OutcomeUncertainError);
    const failing = action({ retrySafety: 'safe' });
    await expect(
      runner.run(failing, async () => {
        throw new Error('503');
      }),
    ).rejects.toThrow('503');
  });

  it('resolve records a verdict on an uncertain key: applied replays, first resolution wins', async () => {
    const { runner } = setup();
    const a = action();
    await runner.execute(a, async () => {
      throw new Error('timeout');
    });
    const verdict = await runner.resolve(a, {
      applied: true,
      result: { payload: bytes('found') },
      reason: 'in ledger',
    });
    expect(verdict.outcome).toBe('resolved');
    const again = await runner.resolve(a, { applied: false, reason: 'late' });
    expect(again.outcome).toBe('replayed');
    expect(text((await runner.run(a, ok('never'))).payload)).toBe('found');
  });

  it('resolve not applied lets the action run again', async () => {
    const { runner } = setup();
    const a = action();
    await runner.execute(a, async () => {
      throw new Error('timeout');
    });
    await runner.resolve(a, { applied: false, reason: 'not in ledger' });
    expect((await runner.execute(a, ok('retry'))).outcome).toBe('applied');
  });
});
