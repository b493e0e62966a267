import { setMaxListeners } from 'node:events';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Release } from '../../src/syncx/gate.js';
import { Gate, SyncxError } from '../../src/syncx/index.js';
import { countingController, deferred, flush, track } from './helpers.js';

describe('Gate construction', () => {
  it.each([
    ['NaN', Number.NaN],
    ['a string', '3'],
    ['the string Infinity', 'Infinity'],
    ['undefined', undefined],
    ['a fraction', 2.5],
  ])('rejects %s as cap with a typed INVALID_CAPACITY error', (_, cap) => {
    const attempt = () => new Gate(cap as number);
    expect(attempt).toThrow(SyncxError);
    expect(attempt).toThrow(TypeError);
    try {
      attempt();
    } catch (error) {
      expect((error as SyncxError).code).toBe('INVALID_CAPACITY');
    }
  });

  it.each([0, -1, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY])(
    'treats cap %s as unlimited',
    async (cap) => {
      const gate = new Gate(cap);
      const releases = await Promise.all(Array.from({ length: 1000 }, () => gate.acquire()));
      expect(gate.activeCount).toBe(1000);
      expect(gate.pendingCount).toBe(0);
      expect(gate.tryAcquire()).toBeTypeOf('function');
      for (const release of releases) release();
      expect(gate.activeCount).toBe(1);
    },
  );
});

describe('Gate.acquire', () => {
  it('admits up to cap at once and queues the rest', async () => {
    const gate = new Gate(2);
    await gate.acquire();
    await gate.acquire();
    const third = track(gate.acquire());
    await flush();
    expect(third.settled).toBe(false);
    expect(gate.activeCount).toBe(2);
    expect(gate.pendingCount).toBe(1);
  });

  it('hands a released slot to the first waiter, keeping activeCount at cap', async () => {
    const gate = new Gate(1);
    const release = await gate.acquire();
    const next = track(gate.acquire());
    release();
    expect(gate.activeCount).toBe(1);
    expect(gate.pendingCount).toBe(0);
    expect(gate.tryAcquire()).toBeUndefined();
    await flush();
    expect(next.value).toBeTypeOf('function');
    next.value!();
    expect(gate.activeCount).toBe(0);
  });

  it('admits waiters in FIFO order', async () => {
    const gate = new Gate(1);
    const first = await gate.acquire();
    const order: number[] = [];
    const waiters = [0, 1, 2, 3, 4].map((i) =>
      gate.acquire().then((release) => {
        order.push(i);
        release();
      }),
    );
    first();
    await Promise.all(waiters);
    expect(order).toEqual([0, 1, 2, 3, 4]);
    expect(gate.activeCount).toBe(0);
  });

  it('keeps FIFO order across thousands of waiters (queue compaction) with aborts in between', async () => {
    const gate = new Gate(1);
    const first = await gate.acquire();
    const order: number[] = [];
    const controllers: AbortController[] = [];
    const waiters: Promise<void>[] = [];
    for (let i = 0; i < 5000; i++) {
      const controller = new AbortController();
      controllers.push(controller);
      waiters.push(
        gate.acquire({ signal: controller.signal }).then(
          (release) => {
            order.push(i);
            release();
          },
          () => undefined,
        ),
      );
    }
    for (let i = 1; i < 5000; i += 7) controllers[i]!.abort();
    first();
    await Promise.all(waiters);
    const expected = Array.from({ length: 5000 }, (_, i) => i).filter((i) => (i - 1) % 7 !== 0);
    expect(order).toEqual(expected);
    expect(gate.pendingCount).toBe(0);
    expect(gate.activeCount).toBe(0);
  });

  it('runs at most cap holders at a time', async () => {
    const gate = new Gate(3);
    let running = 0;
    let peak = 0;
    await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const release = await gate.acquire();
        running++;
        peak = Math.max(peak, running);
        for (let k = 0; k < i % 4; k++) await Promise.resolve();
        running--;
        release();
      }),
    );
    expect(peak).toBe(3);
  });
});

describe('Gate release is idempotent', () => {
  it('frees one slot when called twice in the same tick', async () => {
    const gate = new Gate(2);
    const a = await gate.acquire();
    await gate.acquire();
    a();
    a();
    expect(gate.activeCount).toBe(1);
  });

  it('frees one slot when called twice across ticks', async () => {
    const gate = new Gate(2);
    const a = await gate.acquire();
    await gate.acquire();
    a();
    await flush();
    a();
    expect(gate.activeCount).toBe(1);
  });

  it('admits exactly one waiter when two paths release the same slot in the same tick', async () => {
    const gate = new Gate(2);
    const a = await gate.acquire();
    await gate.acquire();
    const waiters = [track(gate.acquire()), track(gate.acquire()), track(gate.acquire())];
    // A timeout path and the normal return path both release the same handle.
    const timeout = deferred();
    const done = deferred();
    const paths = Promise.all([timeout.promise.then(a), done.promise.then(a)]);
    timeout.resolve();
    done.resolve();
    await paths;
    await flush();
    expect(waiters.map((w) => w.settled)).toEqual([true, false, false]);
    expect(gate.activeCount).toBe(2);
    expect(gate.pendingCount).toBe(2);
    expect(gate.tryAcquire()).toBeUndefined();
  });

  it('admits exactly one waiter when the second release comes ticks later', async () => {
    const gate = new Gate(1);
    const a = await gate.acquire();
    const second = track(gate.acquire());
    const third = track(gate.acquire());
    a();
    await flush();
    a();
    await flush();
    expect(second.settled).toBe(true);
    expect(third.settled).toBe(false);
    expect(gate.activeCount).toBe(1);
    expect(gate.pendingCount).toBe(1);
  });

  it('never lets a stale release free a slot handed to someone else', async () => {
    const gate = new Gate(1);
    const a = await gate.acquire();
    const b = track(gate.acquire());
    a();
    await flush();
    a();
    const c = track(gate.acquire());
    await flush();
    expect(c.settled).toBe(false);
    b.value!();
    await flush();
    expect(c.settled).toBe(true);
  });
});

describe('Gate abort', () => {
  it('rejects at once with the reason of an already-aborted signal and takes no slot', async () => {
    const gate = new Gate(1);
    const { controller, signal, adds } = countingController();
    const reason = new Error('stop');
    controller.abort(reason);
    const attempt = track(gate.acquire({ signal }));
    await Promise.resolve();
    await Promise.resolve();
    expect(attempt.settled).toBe(true);
    expect(attempt.reason).toBe(reason);
    expect(gate.activeCount).toBe(0);
    expect(gate.pendingCount).toBe(0);
    expect(adds()).toBe(0);
  });

  it('rejects an already-aborted signal even when the gate is full, without queueing', async () => {
    const gate = new Gate(1);
    await gate.acquire();
    const attempt = gate.acquire({ signal: AbortSignal.abort('gone') });
    await expect(attempt).rejects.toBe('gone');
    expect(gate.pendingCount).toBe(0);
  });

  it('removes a waiter aborted while queued, rejects with the reason and drops its listener', async () => {
    const gate = new Gate(1);
    const release = await gate.acquire();
    const { controller, signal, adds, live } = countingController();
    const waiting = track(gate.acquire({ signal }));
    expect(adds()).toBe(1);
    expect(live()).toBe(1);
    expect(gate.pendingCount).toBe(1);
    const reason = new Error('cancelled');
    controller.abort(reason);
    expect(gate.pendingCount).toBe(0);
    await flush();
    expect(waiting.reason).toBe(reason);
    expect(live()).toBe(0);
    release();
    expect(gate.activeCount).toBe(0);
  });

  it('removes the abort listener when the wait ends with a slot', async () => {
    const gate = new Gate(1);
    const release = await gate.acquire();
    const { controller, signal, adds, removes, live } = countingController();
    const waiting = gate.acquire({ signal });
    expect(live()).toBe(1);
    release();
    const second = await waiting;
    expect(adds()).toBe(1);
    expect(removes()).toBe(1);
    expect(live()).toBe(0);
    // Aborting after admission changes nothing: the slot is held until released.
    controller.abort();
    expect(gate.activeCount).toBe(1);
    second();
    expect(gate.activeCount).toBe(0);
  });

  it('adds no listener when a slot is free at once', async () => {
    const gate = new Gate(1);
    const { signal, adds, live } = countingController();
    const release = await gate.acquire({ signal });
    expect(adds()).toBe(0);
    expect(live()).toBe(0);
    release();
  });

  it('leaves the other waiters in order when a middle waiter aborts', async () => {
    const gate = new Gate(1);
    const first = await gate.acquire();
    const controller = new AbortController();
    const order: string[] = [];
    const a = gate.acquire().then((r) => {
      order.push('a');
      r();
    });
    const b = gate.acquire({ signal: controller.signal }).catch(() => order.push('b aborted'));
    const c = gate.acquire().then((r) => {
      order.push('c');
      r();
    });
    controller.abort();
    expect(gate.pendingCount).toBe(2);
    first();
    await Promise.all([a, b, c]);
    expect(order).toEqual(['b aborted', 'a', 'c']);
  });

  it('rejects every waiter sharing one aborted signal and leaves no listener behind', async () => {
    const gate = new Gate(1);
    const release = await gate.acquire();
    const { controller, signal, live } = countingController();
    setMaxListeners(100, signal);
    const waits = Array.from({ length: 100 }, () => gate.acquire({ signal }));
    expect(live()).toBe(100);
    controller.abort('shutdown');
    const outcomes = await Promise.allSettled(waits);
    expect(outcomes.every((o) => o.status === 'rejected' && o.reason === 'shutdown')).toBe(true);
    expect(gate.pendingCount).toBe(0);
    expect(live()).toBe(0);
    release();
    expect(gate.activeCount).toBe(0);
  });
});

describe('Gate.tryAcquire', () => {
  it('returns a release while a slot is free and undefined once full, never queueing', () => {
    const gate = new Gate(1);
    const release = gate.tryAcquire();
    expect(release).toBeTypeOf('function');
    expect(gate.tryAcquire()).toBeUndefined();
    expect(gate.pendingCount).toBe(0);
    expect(gate.activeCount).toBe(1);
    release!();
    release!();
    expect(gate.activeCount).toBe(0);
    expect(gate.tryAcquire()).toBeTypeOf('function');
  });

  it('does not jump the queue', async () => {
    const gate = new Gate(1);
    const release = await gate.acquire();
    const waiter = track(gate.acquire());
    release();
    expect(gate.tryAcquire()).toBeUndefined();
    await flush();
    expect(waiter.settled).toBe(true);
  });
});

describe('Gate.run', () => {
  it('returns the result and releases after success', async () => {
    const gate = new Gate(1);
    await expect(gate.run(async () => 7)).resolves.toBe(7);
    expect(gate.activeCount).toBe(0);
  });

  it('releases after an async rejection and after a synchronous throw', async () => {
    const gate = new Gate(1);
    const boom = new Error('boom');
    await expect(gate.run(() => Promise.reject(boom))).rejects.toBe(boom);
    await expect(
      gate.run(() => {
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(gate.activeCount).toBe(0);
  });

  it('holds the slot while fn runs and honours the signal while waiting', async () => {
    const gate = new Gate(1);
    const running = deferred<number>();
    const first = gate.run(() => running.promise);
    expect(gate.activeCount).toBe(1);
    const controller = new AbortController();
    const second = gate.run(() => 2, { signal: controller.signal });
    controller.abort('late');
    await expect(second).rejects.toBe('late');
    running.resolve(1);
    await expect(first).resolves.toBe(1);
    expect(gate.activeCount).toBe(0);
  });
});

describe('Gate model check', () => {
  type Op =
    | { kind: 'acquire' }
    | { kind: 'acquireAbortable' }
    | { kind: 'abort'; pick: number }
    | { kind: 'release'; pick: number }
    | { kind: 'try' };

  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.constant<Op>({ kind: 'acquire' }),
    fc.constant<Op>({ kind: 'acquireAbortable' }),
    fc.nat().map<Op>((pick) => ({ kind: 'abort', pick })),
    fc.nat().map<Op>((pick) => ({ kind: 'release', pick })),
    fc.constant<Op>({ kind: 'try' }),
  );

  it('matches a FIFO semaphore model under any mix of acquire, abort, double release and try', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 4 }),
        fc.array(op, { maxLength: 60 }),
        async (cap, ops) => {
          const gate = new Gate(cap);
          let nextId = 0;
          const handles: Release[] = []; // every release handed out, used ones included
          const held = new Set<Release>();
          const queue: number[] = [];
          const modelAdmitted: number[] = [];
          const admitted: number[] = [];
          const modelRejected: number[] = [];
          const rejected: number[] = [];
          const controllers = new Map<number, AbortController>();

          const acquire = (signal?: AbortSignal): number => {
            const id = nextId++;
            if (held.size >= cap) queue.push(id);
            else modelAdmitted.push(id);
            gate.acquire({ signal }).then(
              (release) => {
                admitted.push(id);
                handles.push(release);
                held.add(release);
              },
              () => rejected.push(id),
            );
            return id;
          };

          for (const o of ops) {
            if (o.kind === 'acquire') acquire();
            else if (o.kind === 'acquireAbortable') {
              const controller = new AbortController();
              controllers.set(acquire(controller.signal), controller);
            } else if (o.kind === 'abort') {
              const ids = [...controllers.keys()];
              if (ids.length === 0) continue;
              const id = ids[o.pick % ids.length]!;
              controllers.get(id)!.abort();
              controllers.delete(id);
              const at = queue.indexOf(id);
              if (at >= 0) {
                queue.splice(at, 1);
                modelRejected.push(id);
              }
            } else if (o.kind === 'release') {
              if (handles.length === 0) continue;
              const release = handles[o.pick % handles.length]!;
              if (held.delete(release)) {
                const next = queue.shift();
                if (next !== undefined) modelAdmitted.push(next);
              }
              release();
            } else {
              const release = gate.tryAcquire();
              expect(release !== undefined).toBe(held.size < cap);
              if (release) {
                handles.push(release);
                held.add(release);
              }
            }
            await flush();
            expect(gate.activeCount).toBe(held.size);
            expect(gate.activeCount).toBeLessThanOrEqual(cap);
            expect(gate.pendingCount).toBe(queue.length);
          }
          expect(admitted).toEqual(modelAdmitted);
          expect(rejected).toEqual(modelRejected);
        },
      ),
      { numRuns: 300 },
    );
  });
});
