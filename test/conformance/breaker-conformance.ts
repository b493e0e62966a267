import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { BreakerPolicy, BreakerStore } from '../../src/core/breaker.js';
import type { Store } from '../../src/core/index.js';

/**
 * A store that keeps breakers, with its clock moved by `advance` (see StoreHarness). A Store too:
 * a half-open probe's lease decides whether its slot can pass on.
 */
export interface BreakerHarness {
  store: BreakerStore & Store;
  advance(ms: number): Promise<void>;
  close(): Promise<void>;
}

const COOL = 30_000;
const WINDOW = 60_000;

/** The breaker state machine every BreakerStore must follow, the same on each store. */
export function describeBreakerConformance(
  name: string,
  factory: () => Promise<BreakerHarness>,
): void {
  describe(`Breaker conformance: ${name}`, () => {
    let h: BreakerHarness;
    let store: BreakerStore & Store;
    let seq = 0;
    let policy: BreakerPolicy;
    beforeEach(async () => {
      h = await factory();
      store = h.store;
      seq += 1;
      policy = {
        group: `bank-${seq}-${Math.random()}`,
        threshold: 3,
        windowMs: WINDOW,
        coolDownMs: COOL,
        maxCoolDownMs: 100_000,
      };
    });
    afterEach(async () => {
      await h.close();
    });

    const uncertain = (key: string, fence = 1) =>
      store.recordOutcome(policy, { key, fence, outcome: 'uncertain' });

    async function open(): Promise<void> {
      for (const key of ['u1', 'u2', 'u3']) await uncertain(key);
    }

    /** Open, cool-down over, `key` admitted as the half-open attempt. */
    async function halfOpen(key = 'probe'): Promise<void> {
      await open();
      await h.advance(COOL);
      const admission = await store.admitAttempt(policy, key);
      expect(admission).toMatchObject({ admitted: true, probe: true });
    }

    it('is closed until anything happens: attempts are admitted, nothing is recorded', async () => {
      expect(await store.admitAttempt(policy, 'k')).toEqual({ admitted: true, probe: false });
      expect((await store.breakers()).find((b) => b.group === policy.group)).toBeUndefined();
      expect(await store.breaker(policy.group)).toBeUndefined();
    });

    it('opens at the threshold-th uncertain outcome within the window, and refuses new attempts until the cool-down ends', async () => {
      await uncertain('u1');
      const second = await uncertain('u2');
      expect(second.record).toMatchObject({ state: 'closed', uncertainInWindow: 2 });
      expect(second.transition).toBeUndefined();
      const third = await uncertain('u3');
      expect(third.transition).toMatchObject({ from: 'closed', to: 'open', by: 'breaker' });
      expect(third.record.state).toBe('open');
      expect(third.record.reason).toContain('3 uncertain outcomes');
      expect(third.record.nextHalfOpenAt).toBe(third.record.since + COOL);
      expect(await store.breaker(policy.group)).toEqual(third.record);
      const refused = await store.admitAttempt(policy, 'new');
      expect(refused).toMatchObject({
        admitted: false,
        retryAt: third.record.since + COOL,
        retryAfterMs: COOL,
      });
      await h.advance(COOL - 1);
      expect((await store.admitAttempt(policy, 'new')).admitted).toBe(false);
    });

    it('counts an attempt once however often its outcome is recorded', async () => {
      await uncertain('u1', 1);
      await uncertain('u1', 1);
      const answer = await uncertain('u1', 1);
      expect(answer.record).toMatchObject({ state: 'closed', uncertainInWindow: 1 });
      // Another attempt (fence) of the same key is another outcome.
      expect((await uncertain('u1', 2)).record.uncertainInWindow).toBe(2);
    });

    it('forgets outcomes older than the window', async () => {
      await uncertain('u1');
      await uncertain('u2');
      await h.advance(WINDOW);
      const answer = await uncertain('u3');
      expect(answer.record).toMatchObject({ state: 'closed', uncertainInWindow: 1 });
    });

    it('lets exactly one attempt through after the cool-down (half-open); the others wait for it', async () => {
      await halfOpen('probe');
      const [row] = (await store.breakers()).filter((b) => b.group === policy.group);
      expect(row).toMatchObject({ state: 'half-open', probeKey: 'probe' });
      const other = await store.admitAttempt(policy, 'other');
      expect(other.admitted).toBe(false);
      // The probe's own retry is still the probe.
      expect(await store.admitAttempt(policy, 'probe')).toMatchObject({
        admitted: true,
        probe: true,
      });
    });

    it('closes when the half-open attempt applies; the count starts again', async () => {
      await halfOpen();
      const answer = await store.recordOutcome(policy, {
        key: 'probe',
        fence: 1,
        outcome: 'applied',
      });
      expect(answer.transition).toMatchObject({ from: 'half-open', to: 'closed' });
      expect(answer.record).toMatchObject({ state: 'closed', uncertainInWindow: 0 });
      expect(await store.admitAttempt(policy, 'next')).toEqual({ admitted: true, probe: false });
      // The outcomes that opened it no longer count: two new ones do not reach three.
      await uncertain('v1');
      expect((await uncertain('v2')).record.state).toBe('closed');
    });

    it('re-opens with a doubled cool-down, capped, when the half-open attempt ends uncertain', async () => {
      await halfOpen();
      const reopened = await uncertain('probe', 7);
      expect(reopened.transition).toMatchObject({ from: 'half-open', to: 'open' });
      expect(reopened.record.coolDownMs).toBe(2 * COOL);
      expect(reopened.record.nextHalfOpenAt).toBe(reopened.record.since + 2 * COOL);
      await h.advance(2 * COOL);
      expect(await store.admitAttempt(policy, 'p2')).toMatchObject({ admitted: true, probe: true });
      expect((await uncertain('p2')).record.coolDownMs).toBe(100_000);
    });

    it('gives the slot to another attempt when the half-open one learnt nothing, or ran out of time', async () => {
      await halfOpen('probe');
      const released = await store.recordOutcome(policy, {
        key: 'probe',
        fence: 1,
        outcome: 'released',
      });
      expect(released.record.state).toBe('half-open');
      expect(await store.admitAttempt(policy, 'second')).toMatchObject({
        admitted: true,
        probe: true,
      });
      expect((await store.admitAttempt(policy, 'third')).admitted).toBe(false);
      await h.advance(COOL);
      expect(await store.admitAttempt(policy, 'third')).toMatchObject({
        admitted: true,
        probe: true,
      });
      // The earlier probe's late outcome decides nothing.
      const late = await store.recordOutcome(policy, {
        key: 'second',
        fence: 1,
        outcome: 'applied',
      });
      expect(late.record.state).toBe('half-open');
    });

    it('keeps the slot while the half-open attempt still holds its lease, however long it runs', async () => {
      await open();
      await h.advance(COOL);
      const held = await store.acquire({ key: 'slow', resource: 'provider' }, 3 * COOL);
      expect(held.outcome).toBe('granted');
      expect(await store.admitAttempt(policy, 'slow')).toMatchObject({
        admitted: true,
        probe: true,
      });
      // One cool-down on, the probe is still at the provider: nobody joins it there.
      await h.advance(COOL);
      const refused = await store.admitAttempt(policy, 'second');
      expect(refused.admitted).toBe(false);
      if (!refused.admitted && held.outcome === 'granted') {
        expect(refused.retryAt).toBe(held.lease.expiresAt);
      }
      // Its lease ran out (its worker died): the slot passes on.
      await h.advance(2 * COOL);
      expect(await store.admitAttempt(policy, 'second')).toMatchObject({
        admitted: true,
        probe: true,
      });
    });

    it('ignores outcomes of attempts that were in flight while it was open', async () => {
      await open();
      const late = await uncertain('in-flight');
      expect(late.transition).toBeUndefined();
      const applied = await store.recordOutcome(policy, {
        key: 'in-flight-2',
        fence: 1,
        outcome: 'applied',
      });
      expect(applied.record.state).toBe('open');
    });

    it("a person's open holds past the cool-down until a person closes it, with who and why recorded", async () => {
      const opened = await store.setBreaker(policy.group, {
        state: 'open',
        reason: 'bank status page says degraded',
        by: 'alice',
        identity: 'cli@host',
      });
      expect(opened.transition).toMatchObject({ from: 'closed', to: 'open', by: 'alice' });
      expect(opened.record).toMatchObject({ manual: true, by: 'alice', identity: 'cli@host' });
      await h.advance(10 * COOL);
      const refused = await store.admitAttempt(policy, 'k');
      expect(refused.admitted).toBe(false);
      if (!refused.admitted) expect(refused.retryAt).toBeGreaterThan(opened.record.since);
      const closed = await store.setBreaker(policy.group, {
        state: 'closed',
        reason: 'bank is back',
        by: 'bob',
      });
      expect(closed.record).toMatchObject({ state: 'closed', manual: true, by: 'bob' });
      expect(await store.admitAttempt(policy, 'k')).toMatchObject({ admitted: true, probe: false });
    });

    it("a person's close wins over the outcomes counted before it", async () => {
      await open();
      await store.setBreaker(policy.group, {
        state: 'closed',
        reason: 'checked the bank',
        by: 'bob',
      });
      await uncertain('w1');
      const second = await uncertain('w2');
      expect(second.record).toMatchObject({ state: 'closed', uncertainInWindow: 2 });
      expect((await uncertain('w3')).record.state).toBe('open');
    });

    it('logs every transition, oldest first', async () => {
      await halfOpen();
      await store.recordOutcome(policy, { key: 'probe', fence: 1, outcome: 'applied' });
      await store.setBreaker(policy.group, { state: 'open', reason: 'maintenance', by: 'carol' });
      const events = await store.breakerEvents(policy.group);
      expect(events.map((e) => `${e.from}>${e.to}:${e.by}`)).toEqual([
        'closed>open:breaker',
        'open>half-open:breaker',
        'half-open>closed:breaker',
        'closed>open:carol',
      ]);
      expect(events[3]!.reason).toBe('maintenance');
    });

    it('admits exactly one half-open attempt among many asking at once', async () => {
      await open();
      await h.advance(COOL);
      const admissions = await Promise.all(
        Array.from({ length: 10 }, (_, i) => store.admitAttempt(policy, `k${i}`)),
      );
      expect(admissions.filter((a) => a.admitted)).toHaveLength(1);
      expect(admissions.filter((a) => a.admitted && a.probe)).toHaveLength(1);
    });

    it('refuses bad input with a typed error and writes nothing', async () => {
      await expect(store.admitAttempt({ ...policy, threshold: 0 }, 'k')).rejects.toMatchObject({
        code: 'INVALID_ACTION',
      });
      await expect(
        store.recordOutcome(policy, { key: 'k', fence: 1, outcome: 'maybe' as never }),
      ).rejects.toMatchObject({ code: 'INVALID_ACTION' });
      await expect(
        store.setBreaker('', { state: 'open', reason: 'x', by: 'a' }),
      ).rejects.toMatchObject({
        code: 'INVALID_ACTION',
      });
      await expect(
        store.setBreaker(policy.group, { state: 'open', reason: '  ', by: 'a' }),
      ).rejects.toMatchObject({ code: 'INVALID_ACTION' });
      expect((await store.breakers()).find((b) => b.group === policy.group)).toBeUndefined();
    });
  });
}
