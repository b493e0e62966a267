import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { onPanic, PanicError, SyncxError, settleAll } from '../../src/syncx/index.js';
import type { PanicHandler } from '../../src/syncx/panic.js';
import { type Deferred, deferred, flush, track } from './helpers.js';

let panics: PanicError[] = [];
let restore: PanicHandler;
beforeEach(() => {
  panics = [];
  restore = onPanic((error) => panics.push(error));
});
afterEach(() => {
  onPanic(restore);
});

/** Calls that stay in flight until the test settles them; records start order and peak. */
function controlled<T>(n: number) {
  const gates: Deferred<T>[] = Array.from({ length: n }, () => deferred<T>());
  const started: number[] = [];
  let running = 0;
  let peak = 0;
  const fn = async (i: number): Promise<T> => {
    started.push(i);
    running++;
    peak = Math.max(peak, running);
    try {
      return await gates[i]!.promise;
    } finally {
      running--;
    }
  };
  return { fn, gates, started, peak: () => peak };
}

const variants = {
  settleAll: <T>(n: number, fn: (i: number) => T | PromiseLike<T>) => settleAll(n, fn),
  'settleAll with concurrency': <T>(n: number, fn: (i: number) => T | PromiseLike<T>) =>
    settleAll(n, fn, { concurrency: 3 }),
  'settleAll with concurrency and signal': <T>(n: number, fn: (i: number) => T | PromiseLike<T>) =>
    settleAll(n, (i) => fn(i), { concurrency: 3, signal: new AbortController().signal }),
};

describe.each(Object.entries(variants))('%s slot semantics', (_, fanIn) => {
  it.each([0, -1, -100])('resolves n = %s to an empty array without calling fn', async (n) => {
    const fn = vi.fn();
    await expect(fanIn(n, fn)).resolves.toEqual([]);
    expect(fn).not.toHaveBeenCalled();
  });

  it('returns results in index order although calls finish in reverse', async () => {
    const { fn, gates } = controlled<string>(6);
    const result = fanIn(6, fn);
    for (let i = 5; i >= 0; i--) {
      await flush();
      gates[i]?.resolve(`v${i}`);
    }
    await flush();
    for (let i = 0; i < 6; i++) gates[i]!.resolve(`v${i}`);
    expect(await result).toEqual(
      Array.from({ length: 6 }, (_, i) => ({ status: 'fulfilled', value: `v${i}` })),
    );
  });

  it('keeps Error rejections and synchronous Error throws as they are, without a panic', async () => {
    const async = new Error('async');
    const sync = new TypeError('sync');
    const result = await fanIn(3, (i) => {
      if (i === 0) return Promise.reject(async);
      if (i === 1) throw sync;
      return i;
    });
    expect(result).toEqual([
      { status: 'rejected', reason: async },
      { status: 'rejected', reason: sync },
      { status: 'fulfilled', value: 2 },
    ]);
    expect((result[0] as PromiseRejectedResult).reason).toBe(async);
    expect((result[1] as PromiseRejectedResult).reason).toBe(sync);
    expect(panics).toEqual([]);
  });

  it('turns non-Error throws, sync or async, into reported PanicErrors in their slot', async () => {
    const thrown: unknown[] = ['x', 42, undefined, null, { code: 1 }, Symbol('s')];
    const result = await fanIn(thrown.length * 2, (i) => {
      const value = thrown[i % thrown.length];
      if (i < thrown.length) throw value;
      return Promise.reject(value);
    });
    expect(panics).toHaveLength(thrown.length * 2);
    result.forEach((slot, i) => {
      expect(slot.status).toBe('rejected');
      const reason = (slot as PromiseRejectedResult).reason as PanicError;
      expect(reason).toBeInstanceOf(PanicError);
      expect(reason).toBeInstanceOf(Error);
      expect(reason.name).toBe('PanicError');
      expect(reason.value).toBe(thrown[i % thrown.length]);
      expect(reason.stack).toContain('PanicError');
      expect(panics).toContain(reason);
    });
  });

  it('never rejects, even when every call fails, and waits for every slot', async () => {
    const { fn, gates } = controlled<number>(4);
    const outcome = track(fanIn(4, fn));
    await flush();
    gates[0]!.reject(new Error('a'));
    gates[1]!.reject('b');
    gates[2]!.reject(new Error('c'));
    await flush();
    expect(outcome.settled).toBe(false);
    gates[3]!.reject(new Error('d'));
    await flush();
    expect(outcome.settled).toBe(true);
    expect(outcome.value!.every((slot) => slot.status === 'rejected')).toBe(true);
  });

  it('calls fn exactly once per index', async () => {
    const calls: number[] = [];
    await fanIn(25, (i) => {
      calls.push(i);
      return i;
    });
    expect([...calls].sort((a, b) => a - b)).toEqual(Array.from({ length: 25 }, (_, i) => i));
  });
});

describe('argument validation', () => {
  it.each([Number.NaN, Number.POSITIVE_INFINITY, 1.5, '3'])(
    'rejects n = %s synchronously with INVALID_COUNT',
    (n) => {
      expect(() => settleAll(n as number, () => 0)).toThrow(
        expect.objectContaining({ code: 'INVALID_COUNT' }),
      );
      expect(() => settleAll(n as number, () => 0, { concurrency: 2 })).toThrow(SyncxError);
    },
  );

  it.each([Number.NaN, 2.5, '2'])(
    'rejects concurrency = %s synchronously with INVALID_CAPACITY',
    (limit) => {
      expect(() => settleAll(3, () => 0, { concurrency: limit as number })).toThrow(
        expect.objectContaining({ code: 'INVALID_CAPACITY' }),
      );
      expect(() =>
        settleAll(3, () => 0, {
          concurrency: limit as number,
          signal: new AbortController().signal,
        }),
      ).toThrow(SyncxError);
    },
  );
});

describe('fan-in concurrency', () => {
  async function peakOf(run: (fn: (i: number) => Promise<number>) => Promise<unknown>) {
    let running = 0;
    let peak = 0;
    await run(async (i) => {
      running++;
      peak = Math.max(peak, running);
      for (let k = 0; k <= (i * 7) % 5; k++) await Promise.resolve();
      running--;
      return i;
    });
    return peak;
  }

  it.each([
    [1, 10],
    [3, 10],
    [8, 10],
    [8, 3],
    [20, 20],
  ])('runs at most min(concurrency=%s, n=%s) calls at once', async (limit, n) => {
    expect(await peakOf((fn) => settleAll(n, fn, { concurrency: limit }))).toBe(Math.min(limit, n));
    expect(
      await peakOf((fn) =>
        settleAll(n, fn, { concurrency: limit, signal: new AbortController().signal }),
      ),
    ).toBe(Math.min(limit, n));
  });

  it.each([0, -1, Number.POSITIVE_INFINITY])(
    'treats concurrency %s as unlimited',
    async (limit) => {
      expect(await peakOf((fn) => settleAll(40, fn, { concurrency: limit }))).toBe(40);
    },
  );

  it('runs every call at once without a concurrency', async () => {
    expect(await peakOf((fn) => settleAll(30, fn))).toBe(30);
  });

  it('starts indices in ascending order from a shared counter', async () => {
    const { fn, gates, started } = controlled<number>(6);
    const result = settleAll(6, fn, { concurrency: 2 });
    await flush();
    expect(started).toEqual([0, 1]);
    gates[1]!.resolve(1);
    await flush();
    expect(started).toEqual([0, 1, 2]);
    gates[0]!.resolve(0);
    await flush();
    expect(started).toEqual([0, 1, 2, 3]);
    for (const gate of gates) gate.resolve(0);
    await result;
    expect(started).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it('keeps index order, limit and one call per index for random completion orders', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 30 }),
        fc.integer({ min: -1, max: 12 }),
        fc.infiniteStream(fc.nat({ max: 6 })),
        async (n, limit, delays) => {
          const calls = new Array<number>(Math.max(n, 0)).fill(0);
          let running = 0;
          let peak = 0;
          const result = await settleAll(
            n,
            async (i) => {
              calls[i]!++;
              running++;
              peak = Math.max(peak, running);
              const ticks = delays.next().value as number;
              for (let k = 0; k < ticks; k++) await Promise.resolve();
              running--;
              if (ticks === 6) throw new Error(`e${i}`);
              return i * 10;
            },
            { concurrency: limit },
          );
          expect(result).toHaveLength(n);
          result.forEach((slot, i) => {
            if (slot.status === 'fulfilled') expect(slot.value).toBe(i * 10);
            else expect((slot.reason as Error).message).toBe(`e${i}`);
          });
          expect(calls.every((c) => c === 1)).toBe(true);
          expect(peak).toBeLessThanOrEqual(limit <= 0 ? n : Math.min(limit, n));
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('settleAll abort', () => {
  it('passes the signal and the index to fn', async () => {
    const { signal } = new AbortController();
    const seen: [AbortSignal | undefined, number][] = [];
    await settleAll(
      3,
      (i, s) => {
        seen.push([s, i]);
      },
      { concurrency: 2, signal },
    );
    expect(seen).toEqual([
      [signal, 0],
      [signal, 1],
      [signal, 2],
    ]);
  });

  it('stops starting calls after abort, keeps in-flight results, fills the rest with the reason', async () => {
    const controller = new AbortController();
    const { fn, gates, started } = controlled<string>(10);
    const outcome = track(settleAll(10, fn, { concurrency: 3, signal: controller.signal }));
    await flush();
    gates[0]!.resolve('zero');
    await flush();
    expect(started).toEqual([0, 1, 2, 3]);
    const reason = new Error('cancelled');
    controller.abort(reason);
    await flush();
    expect(outcome.settled).toBe(false); // 1, 2 and 3 are still running
    gates[1]!.resolve('one');
    gates[2]!.reject(new Error('two failed'));
    await flush();
    expect(outcome.settled).toBe(false);
    gates[3]!.resolve('three');
    await flush();
    expect(started).toEqual([0, 1, 2, 3]);
    const result = outcome.value!;
    expect(result.slice(0, 4)).toEqual([
      { status: 'fulfilled', value: 'zero' },
      { status: 'fulfilled', value: 'one' },
      { status: 'rejected', reason: new Error('two failed') },
      { status: 'fulfilled', value: 'three' },
    ]);
    for (const slot of result.slice(4)) {
      expect(slot.status).toBe('rejected');
      expect((slot as PromiseRejectedResult).reason).toBe(reason);
    }
    expect(result).toHaveLength(10);
  });

  it('calls fn not once for an already-aborted signal and rejects every slot with its reason', async () => {
    const fn = vi.fn();
    const result = await settleAll(5, fn, { concurrency: 2, signal: AbortSignal.abort('early') });
    expect(fn).not.toHaveBeenCalled();
    expect(result).toEqual(
      Array.from({ length: 5 }, () => ({ status: 'rejected', reason: 'early' })),
    );
    expect(panics).toEqual([]);
  });

  it('keeps a non-Error abort reason rethrown by an in-flight call as is, not as a panic', async () => {
    const controller = new AbortController();
    const result = settleAll(
      2,
      (_, signal) => {
        return new Promise((_, reject) => {
          signal!.addEventListener('abort', () => reject(signal!.reason), { once: true });
        });
      },
      { concurrency: 0, signal: controller.signal },
    );
    await flush();
    controller.abort('stop');
    expect(await result).toEqual([
      { status: 'rejected', reason: 'stop' },
      { status: 'rejected', reason: 'stop' },
    ]);
    expect(panics).toEqual([]);
  });

  it('changes nothing when the abort comes after every call finished', async () => {
    const controller = new AbortController();
    const result = await settleAll(3, (i) => i, { concurrency: 1, signal: controller.signal });
    controller.abort();
    expect(result.map((slot) => slot.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled']);
  });
});

describe('panic handler', () => {
  it('gets the same PanicError instance that lands in the slot, once per panic', async () => {
    const result = await settleAll(2, (i) => {
      if (i === 1) throw 'x';
      return i;
    });
    expect(panics).toHaveLength(1);
    expect((result[1] as PromiseRejectedResult).reason).toBe(panics[0]);
    expect(panics[0]!.value).toBe('x');
    expect(panics[0]!.message).toContain('"x"');
  });

  it('does not let a throwing handler reject the fan-in', async () => {
    onPanic(() => {
      throw new Error('broken hook');
    });
    const result = await settleAll(1, () => {
      throw 42;
    });
    expect((result[0] as PromiseRejectedResult).reason).toBeInstanceOf(PanicError);
  });

  it('returns the previous handler and restores the console.error default on undefined', async () => {
    const mine: PanicHandler = () => {};
    onPanic(mine);
    expect(onPanic(undefined)).toBe(mine);
    const log = vi.spyOn(console, 'error').mockImplementation(() => {});
    try {
      await settleAll(1, () => {
        throw undefined;
      });
      expect(log).toHaveBeenCalledTimes(1);
      expect(log.mock.calls[0]).toContainEqual(expect.any(PanicError));
    } finally {
      log.mockRestore();
    }
  });

  it('describes values that cannot be turned into a string', () => {
    const odd = Object.create(null) as object;
    const error = new PanicError(odd);
    expect(error.value).toBe(odd);
    expect(error.message).toContain('[object Object]');
  });
});

describe('settleAll options', () => {
  it('runs at most `concurrency` calls at once, and all at once without it', async () => {
    let running = 0;
    let peak = 0;
    const fn = async (i: number) => {
      running++;
      peak = Math.max(peak, running);
      for (let k = 0; k <= (i * 7) % 5; k++) await Promise.resolve();
      running--;
      return i;
    };
    await settleAll(10, fn, { concurrency: 3 });
    expect(peak).toBe(3);
    peak = 0;
    await settleAll(10, fn);
    expect(peak).toBe(10);
  });

  it('rejects a concurrency that is not an integer with INVALID_CAPACITY', () => {
    expect(() => settleAll(3, () => 0, { concurrency: 2.5 })).toThrow(
      expect.objectContaining({ code: 'INVALID_CAPACITY' }),
    );
  });

  it('passes the index and the signal; after an abort, unstarted slots get its reason', async () => {
    const controller = new AbortController();
    const seen: Array<[number, AbortSignal | undefined]> = [];
    const result = await settleAll(
      4,
      async (i, signal) => {
        seen.push([i, signal]);
        if (i === 1) controller.abort('stop');
        return i;
      },
      { concurrency: 1, signal: controller.signal },
    );
    expect(seen).toEqual([
      [0, controller.signal],
      [1, controller.signal],
    ]);
    expect(result).toEqual([
      { status: 'fulfilled', value: 0 },
      { status: 'fulfilled', value: 1 },
      { status: 'rejected', reason: 'stop' },
      { status: 'rejected', reason: 'stop' },
    ]);
  });
});
