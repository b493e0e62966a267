/**
 * PgStore's bound on a busy resource's waiters, as pure logic (the store-level behaviour is in
 * test/store/postgres-busy-resource.test.ts): calls of a resource nobody found held all go in;
 * once one finds the row held, at most `perResource` are in flight for it and the rest are turned
 * away, until no call has found it held for `lockWaitMs`; over all resources, at most half the pool.
 */
import { describe, expect, it } from 'vitest';
import { ResourceWaiters } from '../../src/store/postgres/waiters.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('ResourceWaiters', () => {
  it('lets every call of a quiet resource in, and one of those that find its row held wait', () => {
    const waiters = new ResourceWaiters(1, 1_000, 20);
    const passes = Array.from({ length: 5 }, () => waiters.enter('r'));
    expect(passes.every(Boolean)).toBe(true);
    expect(passes[0]!.held()).toBe(true);
    expect(passes[1]!.held()).toBe(false);
    // Busy now: a new call is turned away before it asks anything.
    expect(waiters.enter('r')).toBeUndefined();
    // Other resources are not concerned.
    expect(waiters.enter('other')?.held()).toBe(true);
    passes[0]!.leave();
    passes[0]!.leave(); // idempotent: frees one place, not two
    const next = waiters.enter('r');
    expect(next?.held()).toBe(true);
    expect(waiters.enter('r')).toBeUndefined();
  });

  it('allows `perResource` callers at a time of a busy resource', () => {
    const waiters = new ResourceWaiters(3, 1_000, 20);
    expect(waiters.enter('r')!.held()).toBe(true);
    const inFlight = [waiters.enter('r'), waiters.enter('r')];
    expect(inFlight.every(Boolean)).toBe(true);
    expect(waiters.enter('r')).toBeUndefined();
    inFlight[0]!.leave();
    expect(waiters.enter('r')).toBeDefined();
  });

  it('lets at most half the pool wait over all busy resources, so free resources keep connections (issue 39)', () => {
    const waiters = new ResourceWaiters(1, 1_000, 10);
    const passes = Array.from({ length: 63 }, (_, i) => waiters.enter(`busy-${i}`)!);
    const waiting = passes.map((pass) => pass.held());
    expect(waiting.filter(Boolean)).toHaveLength(5);
    // A free resource's call goes in; a busy one's is turned away until a place is given back.
    expect(waiters.enter('free')?.placed).toBe(false);
    expect(waiters.enter('busy-0')).toBeUndefined();
    expect(waiters.enter('busy-62')).toBeUndefined();
    passes[0]!.leave();
    expect(waiters.enter('busy-62')?.placed).toBe(true);
    // A pool of one still lets one call wait.
    const tiny = new ResourceWaiters(1, 1_000, 1);
    expect(tiny.enter('a')!.held()).toBe(true);
    expect(tiny.enter('b')!.held()).toBe(false);
  });

  it('tells a turned-away caller to come back after the waiter is done, spread over one bound', () => {
    const waiters = new ResourceWaiters(1, 200, 20);
    waiters.enter('r')!.held();
    const delays = Array.from({ length: 50 }, () => waiters.retryAfterMs('r'));
    for (const delay of delays) {
      expect(delay).toBeGreaterThan(150);
      expect(delay).toBeLessThanOrEqual(400);
    }
    expect(new Set(delays).size).toBeGreaterThan(10);
  });

  it('forgets a busy resource once nobody found its row held for the bound', async () => {
    const waiters = new ResourceWaiters(1, 30, 20);
    const waiter = waiters.enter('r')!;
    waiter.held();
    waiter.leave();
    const holding = waiters.enter('r')!; // the place is free again
    expect(waiters.enter('r')).toBeUndefined();
    holding.leave();
    await sleep(60);
    const all = Array.from({ length: 5 }, () => waiters.enter('r'));
    expect(all.every(Boolean)).toBe(true);
  });
});
