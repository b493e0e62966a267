import { describe, expect, it } from 'vitest';
import { KeyedGate, SyncxError } from '../../src/syncx/index.js';
import { countingController, deferred, flush, track } from './helpers.js';

describe('KeyedGate construction', () => {
  it.each([Number.NaN, '2', 1.5])('rejects cap %s with INVALID_CAPACITY', (cap) => {
    expect(() => new KeyedGate(cap as number)).toThrow(
      expect.objectContaining({ name: 'SyncxError', code: 'INVALID_CAPACITY' }),
    );
    expect(() => new KeyedGate(cap as number)).toThrow(SyncxError);
  });

  it.each([0, -3, Number.POSITIVE_INFINITY])('treats cap %s as unlimited per key', async (cap) => {
    const gate = new KeyedGate(cap);
    await Promise.all(Array.from({ length: 500 }, () => gate.acquire('k')));
    expect(gate.activeCount('k')).toBe(500);
    expect(gate.pendingCount('k')).toBe(0);
    expect(gate.tryAcquire('k')).toBeTypeOf('function');
  });
});

describe('KeyedGate per-key limits', () => {
  it('limits each key separately', async () => {
    const gate = new KeyedGate(1);
    await gate.acquire('a');
    const otherKey = track(gate.acquire('b'));
    const sameKey = track(gate.acquire('a'));
    await flush();
    expect(otherKey.settled).toBe(true);
    expect(sameKey.settled).toBe(false);
    expect(gate.activeCount('a')).toBe(1);
    expect(gate.pendingCount('a')).toBe(1);
    expect(gate.activeCount('b')).toBe(1);
    expect(gate.pendingCount('b')).toBe(0);
    expect(gate.size).toBe(2);
  });

  it('reports zero for keys it does not track', () => {
    const gate = new KeyedGate(2);
    expect(gate.activeCount('nobody')).toBe(0);
    expect(gate.pendingCount('nobody')).toBe(0);
    expect(gate.size).toBe(0);
  });

  it('admits waiters of one key in FIFO order', async () => {
    const gate = new KeyedGate(1);
    const first = await gate.acquire('k');
    const order: number[] = [];
    const waits = [0, 1, 2, 3].map((i) =>
      gate.acquire('k').then((release) => {
        order.push(i);
        release();
      }),
    );
    first();
    await Promise.all(waits);
    expect(order).toEqual([0, 1, 2, 3]);
  });

  it('accepts any key type, compared like Map keys', async () => {
    const gate = new KeyedGate<object | number>(1);
    const a = {};
    const b = {};
    await gate.acquire(a);
    expect(gate.tryAcquire(b)).toBeTypeOf('function');
    expect(gate.tryAcquire(a)).toBeUndefined();
    expect(gate.tryAcquire(1)).toBeTypeOf('function');
  });
});

describe('KeyedGate forgets idle keys', () => {
  it('drops a key once its last holder releases, so size returns to 0', async () => {
    const gate = new KeyedGate(2);
    const releases = await Promise.all(['a', 'b', 'c', 'a'].map((key) => gate.acquire(key)));
    expect(gate.size).toBe(3);
    releases[0]!();
    expect(gate.size).toBe(3); // 'a' still has a holder
    for (const release of releases) release();
    expect(gate.size).toBe(0);
  });

  it('keeps a key while a waiter is being handed the slot', async () => {
    const gate = new KeyedGate(1);
    const first = await gate.acquire('k');
    const second = gate.acquire('k');
    first();
    expect(gate.size).toBe(1);
    expect(gate.activeCount('k')).toBe(1);
    (await second)();
    expect(gate.size).toBe(0);
  });

  it('does not grow over many distinct keys used one after another', async () => {
    const gate = new KeyedGate(1);
    for (let i = 0; i < 1000; i++) {
      const release = await gate.acquire(`request-${i}`);
      release();
      gate.tryAcquire(`try-${i}`)!();
    }
    expect(gate.size).toBe(0);
  });

  it('forgets a key after its waiter aborted and the holder released', async () => {
    const gate = new KeyedGate(1);
    const release = await gate.acquire('k');
    const controller = new AbortController();
    const waiting = gate.acquire('k', { signal: controller.signal });
    controller.abort();
    await expect(waiting).rejects.toBe(controller.signal.reason);
    release();
    expect(gate.size).toBe(0);
  });

  it('ignores a stale double release after the key was forgotten and reused', async () => {
    const gate = new KeyedGate(1);
    const old = await gate.acquire('k');
    old();
    expect(gate.size).toBe(0);
    const fresh = await gate.acquire('k');
    const waiter = track(gate.acquire('k'));
    old();
    await flush();
    expect(waiter.settled).toBe(false);
    expect(gate.activeCount('k')).toBe(1);
    expect(gate.pendingCount('k')).toBe(1);
    expect(gate.size).toBe(1);
    fresh();
    await flush();
    expect(waiter.settled).toBe(true);
  });
});

describe('KeyedGate release is idempotent', () => {
  it('admits one waiter of the key when two paths release the same handle', async () => {
    const gate = new KeyedGate(1);
    const release = await gate.acquire('k');
    const second = track(gate.acquire('k'));
    const third = track(gate.acquire('k'));
    await Promise.all([Promise.resolve().then(release), Promise.resolve().then(release)]);
    await flush();
    release();
    await flush();
    expect(second.settled).toBe(true);
    expect(third.settled).toBe(false);
    expect(gate.activeCount('k')).toBe(1);
  });
});

describe('KeyedGate abort', () => {
  it('rejects an already-aborted signal at once without creating the key', async () => {
    const gate = new KeyedGate(1);
    const { controller, signal, adds } = countingController();
    controller.abort('no');
    const attempt = track(gate.acquire('k', { signal }));
    await Promise.resolve();
    await Promise.resolve();
    expect(attempt.reason).toBe('no');
    expect(gate.size).toBe(0);
    expect(adds()).toBe(0);
  });

  it('takes an aborted waiter out of its key queue and removes its listener', async () => {
    const gate = new KeyedGate(1);
    const release = await gate.acquire('k');
    const { controller, signal, live } = countingController();
    const waiting = track(gate.acquire('k', { signal }));
    await flush();
    expect(gate.pendingCount('k')).toBe(1);
    expect(live()).toBe(1);
    const reason = new Error('give up');
    controller.abort(reason);
    expect(gate.pendingCount('k')).toBe(0);
    await flush();
    expect(waiting.reason).toBe(reason);
    expect(live()).toBe(0);
    release();
    expect(gate.activeCount('k')).toBe(0);
  });

  it('removes the listener when a keyed wait ends with a slot', async () => {
    const gate = new KeyedGate(1);
    const release = await gate.acquire('k');
    const { signal, removes, live } = countingController();
    const waiting = gate.acquire('k', { signal });
    release();
    (await waiting)();
    expect(removes()).toBe(1);
    expect(live()).toBe(0);
  });
});

describe('KeyedGate.tryAcquire', () => {
  it('refuses a busy key at once without queueing, and frees it on release', () => {
    const gate = new KeyedGate(1);
    const release = gate.tryAcquire('account:42');
    expect(release).toBeTypeOf('function');
    expect(gate.tryAcquire('account:42')).toBeUndefined();
    expect(gate.pendingCount('account:42')).toBe(0);
    release!();
    release!();
    expect(gate.size).toBe(0);
    expect(gate.tryAcquire('account:42')).toBeTypeOf('function');
  });
});

describe('KeyedGate.run', () => {
  it('runs under the key limit and releases however fn ends', async () => {
    const gate = new KeyedGate(1);
    const hold = deferred<string>();
    const first = gate.run('k', () => hold.promise);
    const boom = new Error('boom');
    const second = gate.run('k', () => {
      throw boom;
    });
    await flush();
    expect(gate.activeCount('k')).toBe(1);
    expect(gate.pendingCount('k')).toBe(1);
    hold.resolve('done');
    await expect(first).resolves.toBe('done');
    await expect(second).rejects.toBe(boom);
    expect(gate.size).toBe(0);
  });
});
