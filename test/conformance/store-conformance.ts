import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  type Action,
  FenceStaleError,
  InvalidActionError,
  KeyConflictError,
  type Lease,
  MAX_PENDING_VERDICTS,
  NotAppliedError,
  NotUncertainError,
  PendingVerdictsFullError,
  type RetrySafety,
  Runner,
  StaleVerdictError,
  type Store,
} from '../../src/core/index.js';
import { keepsPendingVerdicts, type SweepCoordination } from '../../src/core/store.js';
import { MemoryFencedSink } from '../../src/store/memory.js';
import { bytes, text } from '../support/bytes.js';

/**
 * What a store implementation provides to the conformance suite. `advance`
 * moves the store's clock forward (an injected clock, or the database's
 * clock function in a test schema), so lease expiry is tested without sleeping.
 */
export interface StoreHarness {
  /** With the sweepers' internal coordination, which both bundled stores have. */
  store: Store & SweepCoordination;
  advance(ms: number): Promise<void>;
  close(): Promise<void>;
}

export type StoreFactory = () => Promise<StoreHarness>;

const TTL = 10_000;

/** The contract every Store must pass, unchanged, whatever it is built on. */
export function describeStoreConformance(name: string, factory: StoreFactory): void {
  describe(`Store conformance: ${name}`, () => {
    let h: StoreHarness;
    let store: Store & SweepCoordination;
    let seq = 0;
    beforeEach(async () => {
      h = await factory();
      store = h.store;
    });
    afterEach(async () => {
      await h.close();
    });

    /** Fresh key and resource names per test, so a shared database never leaks state between tests. */
    function action(overrides: Partial<Action> = {}): Action {
      seq += 1;
      return {
        key: `k-${seq}-${Math.random()}`,
        resource: `r-${seq}-${Math.random()}`,
        ...overrides,
      };
    }

    async function grant(a: Action, applying = true): Promise<Lease> {
      const acq = await store.acquire(a, TTL, { applying });
      if (acq.outcome !== 'granted') throw new Error(`expected a grant, got ${acq.outcome}`);
      return acq.lease;
    }

    describe('acquire precedence', () => {
      it('grants a free key with fence 1 and a lease judged by the store clock', async () => {
        const a = action();
        const acq = await store.acquire(a, TTL);
        expect(acq.outcome).toBe('granted');
        if (acq.outcome !== 'granted') return;
        expect(acq.lease.fence).toBe(1);
        expect(acq.lease.resource).toBe(a.resource);
        expect(acq.lease.ttlMs).toBe(TTL);
        expect((await store.inspect(a.key))?.state).toBe('held');
      });

      it('grants straight into applying when asked', async () => {
        const a = action();
        await grant(a, true);
        expect((await store.inspect(a.key))?.state).toBe('applying');
      });

      it('done beats everything: replayed with the stored result, no fence issued', async () => {
        const a = action();
        const lease = await grant(a);
        await store.complete(a, lease, { payload: bytes('first') });
        const acq = await store.acquire(a, TTL);
        expect(acq).toEqual({ outcome: 'replayed', result: { payload: bytes('first') } });
        const other = action({ resource: a.resource });
        const next = await grant(other);
        expect(next.fence).toBe(2);
      });

      it('done beats a live holder on the same resource', async () => {
        const a = action();
        await store.complete(a, await grant(a), { payload: bytes('r') });
        await grant(action({ resource: a.resource }));
        expect((await store.acquire(a, TTL)).outcome).toBe('replayed');
      });

      it('uncertain beats contended and is never granted', async () => {
        const a = action();
        const lease = await grant(a);
        await store.markUncertain(a, lease, 'response lost');
        await grant(action({ resource: a.resource }));
        expect(await store.acquire(a, TTL)).toEqual({
          outcome: 'uncertain',
          reason: 'response lost',
        });
        await h.advance(TTL * 3);
        expect((await store.acquire(a, TTL)).outcome).toBe('uncertain');
      });

      it('a live holder makes others contended, with the time left on its lease', async () => {
        const a = action();
        await grant(a);
        const advanced = 4_000;
        await h.advance(advanced);
        const acq = await store.acquire(action({ resource: a.resource }), TTL);
        expect(acq.outcome).toBe('contended');
        if (acq.outcome !== 'contended') return;
        // The lease's remainder on the test's movable clock (not a wall-clock time): what is left
        // of the TTL after the advance, less at most a second the real clock moved meanwhile.
        const remainder = TTL - advanced;
        expect(acq.retryAfterMs).toBeGreaterThan(remainder - 1_000);
        expect(acq.retryAfterMs).toBeLessThanOrEqual(remainder);
      });

      it('the same key with a live lease is contended too', async () => {
        const a = action();
        await grant(a, false);
        expect((await store.acquire(a, TTL)).outcome).toBe('contended');
      });

      it('applying with a lost lease becomes uncertain and frees the resource', async () => {
        const a = action();
        await grant(a, true);
        await h.advance(TTL + 1);
        expect(await store.acquire(a, TTL)).toEqual({
          outcome: 'uncertain',
          reason: 'lease lost during apply',
        });
        expect((await store.inspect(a.key))?.state).toBe('uncertain');
        const next = await grant(action({ resource: a.resource }));
        expect(next.fence).toBe(2);
      });

      it('applying with a lost lease is re-granted when declared safe', async () => {
        const a = action({ retrySafety: 'safe' });
        await grant(a, true);
        await h.advance(TTL + 1);
        const lease = await grant(a, true);
        expect(lease.fence).toBe(2);
      });

      it('held with a lost lease is simply re-granted with the next fence', async () => {
        const a = action();
        await grant(a, false);
        await h.advance(TTL + 1);
        expect((await grant(a, false)).fence).toBe(2);
      });

      it('a takeover concludes the previous holder: applying -> uncertain, held -> free', async () => {
        const applying = action();
        await grant(applying, true);
        await h.advance(TTL + 1);
        const taker = action({ resource: applying.resource });
        expect((await grant(taker)).fence).toBe(2);
        expect((await store.inspect(applying.key))?.state).toBe('uncertain');

        const held = action();
        await grant(held, false);
        await h.advance(TTL + 1);
        await grant(action({ resource: held.resource }));
        expect((await store.inspect(held.key))?.state).toBe('free');
        const events = await store.events(applying.key);
        expect(events.map((e) => e.to)).toEqual(['applying', 'uncertain']);
        expect(events[1]?.reason).toBe('lease lost during apply');
      });

      it('fences only grow per resource, and resources are independent', async () => {
        const shared = action().resource;
        const fences: number[] = [];
        for (let i = 0; i < 5; i++) {
          const a = action({ resource: shared });
          const lease = await grant(a);
          fences.push(lease.fence);
          if (i % 2 === 0) await store.complete(a, lease, { payload: bytes(String(i)) });
          else await store.release(a, lease);
        }
        expect(fences).toEqual([1, 2, 3, 4, 5]);
        expect((await grant(action())).fence).toBe(1);
      });
    });

    describe('a dead attempt is judged by the declaration it was granted with', () => {
      type Path = 'same key' | 'takeover' | 'sweep';
      /** Grants `a` into applying declaring `granted`, lets the lease run out, and has `path` find it. */
      async function conclude(granted: RetrySafety, path: Path, newcomer: RetrySafety) {
        const a = action({ retrySafety: granted });
        await grant(a, true);
        await h.advance(TTL + 1);
        if (path === 'same key') {
          const acq = await store.acquire({ ...a, retrySafety: newcomer }, TTL, { applying: true });
          return acq.outcome === 'granted' ? 'free' : acq.outcome;
        }
        if (path === 'takeover')
          await grant(action({ resource: a.resource, retrySafety: newcomer }));
        else await store.sweep();
        return (await store.inspect(a.key))?.state;
      }

      const paths: Path[] = ['same key', 'takeover', 'sweep'];
      it.each(paths)(
        '%s: granted unknown, found by a caller declaring safe -> uncertain',
        async (path) => {
          expect(await conclude('unknown', path, 'safe')).toBe('uncertain');
        },
      );
      it.each(paths)(
        '%s: granted unsafe, found by a caller declaring safe -> uncertain',
        async (path) => {
          expect(await conclude('unsafe', path, 'safe')).toBe('uncertain');
        },
      );
      it.each(paths)(
        '%s: granted safe, found by a caller declaring unknown -> free to re-apply',
        async (path) => {
          expect(await conclude('safe', path, 'unknown')).toBe('free');
        },
      );

      it('the declaration is stored at every grant', async () => {
        const a = action({ retrySafety: 'unsafe' });
        await store.release(a, await grant(a, false));
        await grant({ ...a, retrySafety: 'safe' }, true);
        expect((await store.inspect(a.key))?.retrySafety).toBe('safe');
        await h.advance(TTL + 1);
        expect((await grant({ ...a, retrySafety: 'unsafe' })).fence).toBe(3);
        expect((await store.inspect(a.key))?.retrySafety).toBe('unsafe');
      });
    });

    describe('lease TTL bound', () => {
      it('accepts up to one hour by default and refuses more, writing nothing', async () => {
        const a = action();
        await expect(store.acquire(a, 60 * 60 * 1000 + 1)).rejects.toMatchObject({
          code: 'INVALID_ACTION',
          field: 'ttlMs',
        });
        await expect(store.acquire(a, Number.MAX_SAFE_INTEGER)).rejects.toBeInstanceOf(
          InvalidActionError,
        );
        expect(await store.inspect(a.key)).toBeUndefined();
        const lease = await grant(a);
        await expect(store.renew(a, lease, 60 * 60 * 1000 + 1)).rejects.toMatchObject({
          code: 'INVALID_ACTION',
        });
        expect((await store.renew(a, lease, 60 * 60 * 1000)).ttlMs).toBe(60 * 60 * 1000);
      });
    });

    describe('key binding', () => {
      it('rejects the same key on another resource', async () => {
        const a = action();
        await grant(a);
        await expect(store.acquire({ ...a, resource: 'elsewhere' }, TTL)).rejects.toBeInstanceOf(
          KeyConflictError,
        );
      });

      it('rejects the same key with another payload, also after done', async () => {
        const a = action({ payload: bytes('amount=10') });
        await store.complete(a, await grant(a), { payload: bytes('ok') });
        const conflict = store.acquire({ ...a, payload: bytes('amount=11') }, TTL);
        await expect(conflict).rejects.toMatchObject({ code: 'KEY_CONFLICT', field: 'payload' });
        expect((await store.acquire(a, TTL)).outcome).toBe('replayed');
      });
    });

    describe('fence rules', () => {
      it('renew extends a current lease, and may revive an expired untaken one', async () => {
        const a = action();
        const lease = await grant(a, false);
        await h.advance(TTL - 1);
        const renewed = await store.renew(a, lease, TTL);
        expect(renewed.fence).toBe(lease.fence);
        await h.advance(TTL - 1);
        expect((await store.acquire(action({ resource: a.resource }), TTL)).outcome).toBe(
          'contended',
        );
        await h.advance(TTL * 2);
        await store.renew(a, renewed, TTL);
        expect((await store.acquire(action({ resource: a.resource }), TTL)).outcome).toBe(
          'contended',
        );
      });

      it('renew with applying moves held to applying', async () => {
        const a = action();
        const lease = await grant(a, false);
        await store.renew(a, lease, TTL, { applying: true });
        expect((await store.inspect(a.key))?.state).toBe('applying');
      });

      it('renew, complete, markUncertain and release refuse a lease that was taken over', async () => {
        const a = action();
        const old = await grant(a, false);
        await h.advance(TTL + 1);
        const b = action({ resource: a.resource });
        const current = await grant(b);
        await expect(store.renew(a, old, TTL)).rejects.toBeInstanceOf(FenceStaleError);
        await expect(store.complete(a, old, { payload: bytes('late') })).rejects.toBeInstanceOf(
          FenceStaleError,
        );
        await expect(store.markUncertain(a, old, 'late')).rejects.toBeInstanceOf(FenceStaleError);
        await expect(store.release(a, old)).rejects.toBeInstanceOf(FenceStaleError);
        expect((await store.inspect(b.key))?.state).toBe('applying');
        await store.complete(b, current, { payload: bytes('b') });
        expect((await store.acquire(b, TTL)).outcome).toBe('replayed');
      });

      it('a lease of another key with the right fence number proves nothing', async () => {
        const a = action();
        const lease = await grant(a);
        const intruder = action();
        await expect(
          store.complete(intruder, lease, { payload: bytes('x') }),
        ).rejects.toBeInstanceOf(FenceStaleError);
      });

      it('complete is idempotent for the same fence and keeps the first result', async () => {
        const a = action();
        const lease = await grant(a);
        expect(await store.complete(a, lease, { payload: bytes('one') })).toEqual({
          payload: bytes('one'),
        });
        expect(await store.complete(a, lease, { payload: bytes('two') })).toEqual({
          payload: bytes('one'),
        });
        expect(await store.acquire(a, TTL)).toEqual({
          outcome: 'replayed',
          result: { payload: bytes('one') },
        });
      });

      it('complete frees the resource at once', async () => {
        const a = action();
        await store.complete(a, await grant(a), { payload: bytes('x') });
        expect((await grant(action({ resource: a.resource }))).fence).toBe(2);
      });

      it('markUncertain is idempotent and frees the resource', async () => {
        const a = action();
        const lease = await grant(a);
        await store.markUncertain(a, lease, 'timeout');
        await store.markUncertain(a, lease, 'timeout again');
        expect((await store.inspect(a.key))?.reason).toBe('timeout');
        expect((await store.acquire(action({ resource: a.resource }), TTL)).outcome).toBe(
          'granted',
        );
      });

      it('release frees the resource, puts the key back to free (never done), and is idempotent', async () => {
        const a = action();
        const lease = await grant(a, false);
        await store.release(a, lease);
        await store.release(a, lease);
        expect((await store.inspect(a.key))?.state).toBe('free');
        expect((await grant(a)).fence).toBe(2);
      });
    });

    describe('sweep', () => {
      it('concludes expired holders and leaves live ones alone', async () => {
        const applying = action();
        const held = action();
        const safe = action({ retrySafety: 'safe' });
        const live = action();
        await grant(applying, true);
        await grant(held, false);
        await grant(safe, true);
        await h.advance(TTL + 1);
        await grant(live, true);
        const report = await store.sweep();
        expect(report.uncertain).toContain(applying.key);
        expect(report.freed).toEqual(expect.arrayContaining([held.key, safe.key]));
        expect(report.uncertain).not.toContain(live.key);
        expect(report.freed).not.toContain(live.key);
        expect((await store.inspect(applying.key))?.state).toBe('uncertain');
        expect((await store.inspect(held.key))?.state).toBe('free');
        expect((await store.inspect(live.key))?.state).toBe('applying');
        const again = await store.sweep();
        expect([...again.uncertain, ...again.freed]).not.toContain(applying.key);
      });
    });

    describe('resolution', () => {
      async function uncertain(): Promise<Action> {
        const a = action();
        await store.markUncertain(a, await grant(a), 'response lost');
        return a;
      }

      it('applied: the key becomes done with the given result and replays it', async () => {
        const a = await uncertain();
        const verdict = await store.resolveUncertain(a.key, {
          applied: true,
          result: { payload: bytes('charged') },
          reason: 'seen in the bank statement',
          by: 'alice',
        });
        expect(verdict).toEqual({
          outcome: 'resolved',
          applied: true,
          result: { payload: bytes('charged') },
        });
        expect(await store.acquire(a, TTL)).toEqual({
          outcome: 'replayed',
          result: { payload: bytes('charged') },
        });
        const last = (await store.events(a.key)).at(-1);
        expect(last).toMatchObject({
          from: 'uncertain',
          to: 'done',
          reason: 'seen in the bank statement',
          by: 'alice',
        });
      });

      it('not applied: the key can be granted again', async () => {
        const a = await uncertain();
        expect(
          await store.resolveUncertain(a.key, { applied: false, reason: 'not in the statement' }),
        ).toEqual({
          outcome: 'resolved',
          applied: false,
        });
        expect((await grant(a)).fence).toBe(2);
      });

      it('first resolution wins', async () => {
        const a = await uncertain();
        await store.resolveUncertain(a.key, {
          applied: true,
          result: { payload: bytes('1') },
          reason: 'first',
        });
        const second = await store.resolveUncertain(a.key, { applied: false, reason: 'second' });
        expect(second).toEqual({
          outcome: 'replayed',
          applied: true,
          result: { payload: bytes('1') },
        });

        const b = await uncertain();
        await store.resolveUncertain(b.key, { applied: false, reason: 'first' });
        await expect(
          store.resolveUncertain(b.key, { applied: true, reason: 'second' }),
        ).rejects.toBeInstanceOf(NotUncertainError);
      });

      it('refuses keys that are not uncertain, or unknown', async () => {
        const a = action();
        await grant(a);
        await expect(
          store.resolveUncertain(a.key, { applied: false, reason: 'x' }),
        ).rejects.toMatchObject({
          code: 'NOT_UNCERTAIN',
        });
        await expect(
          store.resolveUncertain('never-seen', { applied: false, reason: 'x' }),
        ).rejects.toBeInstanceOf(NotUncertainError);
      });

      it('a verdict names its attempt: one for another fence is refused as stale, nothing written', async () => {
        const a = await uncertain();
        const fence = (await store.inspect(a.key))!.fence;
        const stale = store.resolveUncertain(a.key, {
          applied: false,
          reason: 'about another attempt',
          fence: fence + 1,
        });
        await expect(stale).rejects.toBeInstanceOf(StaleVerdictError);
        await expect(stale).rejects.toMatchObject({
          code: 'STALE_VERDICT',
          fence: fence + 1,
          currentFence: fence,
        });
        expect((await store.inspect(a.key))?.state).toBe('uncertain');
        expect(
          await store.resolveUncertain(a.key, { applied: false, reason: 'checked', fence }),
        ).toEqual({ outcome: 'resolved', applied: false });
        await expect(
          store.resolveUncertain(a.key, { applied: false, reason: 'x', fence: 0 }),
        ).rejects.toBeInstanceOf(InvalidActionError);
      });

      it('two deciders of one attempt: the late verdict cannot judge the next attempt (one ledger row)', async () => {
        const a = action();
        const sink = new MemoryFencedSink();
        const ledger: number[] = [];
        const applyLosingResponse = async (lease: Lease) => {
          await sink.writeFenced(a.resource, lease.fence, async () => {
            ledger.push(lease.fence);
          });
          await store.markUncertain(a, lease, 'response lost');
        };
        // Attempt 1: granted, never written, its response lost.
        const first = await grant(a);
        await store.markUncertain(a, first, 'response lost');
        // Two deciders look during attempt 1, both through the fence: not applied.
        const attempt = (await store.inspect(a.key))!.fence;
        const probeFence = attempt + 1;
        const seenByA = await sink.readFenced(a.resource, probeFence, async () => ledger.length);
        const seenByB = await sink.readFenced(a.resource, probeFence, async () => ledger.length);
        expect([seenByA, seenByB]).toEqual([0, 0]);
        // B resolves; the key is re-applied, lands, loses its response: attempt 2.
        await store.resolveUncertain(a.key, {
          applied: false,
          reason: 'B: not in the ledger',
          fence: attempt,
        });
        await applyLosingResponse(await grant(a));
        // A's verdict from attempt 1 arrives late: refused, the key stays blocked.
        await expect(
          store.resolveUncertain(a.key, {
            applied: false,
            reason: 'A: not in the ledger',
            fence: attempt,
          }),
        ).rejects.toBeInstanceOf(StaleVerdictError);
        expect(await store.acquire(a, TTL)).toMatchObject({ outcome: 'uncertain' });
        expect(ledger).toHaveLength(1);
      });

      it('a verdict without a fence judges the current attempt; on a done key the fence must match too', async () => {
        const a = await uncertain();
        await store.resolveUncertain(a.key, { applied: false, reason: 'first attempt' });
        const lease = await grant(a);
        await store.complete(a, lease, { payload: bytes('second') });
        await expect(
          store.resolveUncertain(a.key, { applied: false, reason: 'late', fence: lease.fence - 1 }),
        ).rejects.toMatchObject({ code: 'STALE_VERDICT', state: 'done' });
        expect(
          await store.resolveUncertain(a.key, {
            applied: false,
            reason: 'late',
            fence: lease.fence,
          }),
        ).toEqual({ outcome: 'replayed', applied: true, result: { payload: bytes('second') } });
      });

      it('needs no fence: the holder may be long dead', async () => {
        const a = action();
        await grant(a, true);
        await h.advance(TTL * 10);
        await store.sweep();
        await store.resolveUncertain(a.key, {
          applied: true,
          result: { payload: bytes('ok') },
          reason: 'probe',
        });
        expect((await store.acquire(a, TTL)).outcome).toBe('replayed');
      });
    });

    describe('bookkeeping', () => {
      it('records every transition with fence, reason and who made it (by)', async () => {
        const a = action();
        const lease = await grant(a, false);
        await store.renew(a, lease, TTL, { applying: true });
        await store.complete(a, lease, { payload: bytes('x') });
        const events = await store.events(a.key);
        expect(events.map((e) => [e.from, e.to, e.fence])).toEqual([
          ['free', 'held', 1],
          ['held', 'applying', 1],
          ['applying', 'done', 1],
        ]);
        expect(
          events.every((e) => typeof e.at === 'number' && e.reason.length > 0 && e.by.length > 0),
        ).toBe(true);
      });

      it('lists newest change first, or oldest first for a sweeper working through a backlog', async () => {
        const older = action();
        const newer = action();
        await store.markUncertain(older, await grant(older), 'lost');
        await h.advance(1_000);
        await store.markUncertain(newer, await grant(newer), 'lost');
        const keys = (records: Array<{ key: string }>) =>
          records.map((r) => r.key).filter((k) => k === older.key || k === newer.key);
        expect(keys(await store.list({ state: 'uncertain', limit: 1000 }))).toEqual([
          newer.key,
          older.key,
        ]);
        expect(keys(await store.list({ state: 'uncertain', limit: 1000, oldest: true }))).toEqual([
          older.key,
          newer.key,
        ]);
      });

      it("counts the uncertain backlog and the oldest one's age by its own clock", async () => {
        const before = await store.uncertainBacklog();
        const older = action();
        const newer = action();
        await store.markUncertain(older, await grant(older), 'lost');
        await h.advance(5_000);
        await store.markUncertain(newer, await grant(newer), 'lost');
        const backlog = await store.uncertainBacklog();
        expect(backlog.count).toBe(before.count + 2);
        expect(backlog.oldestAgeMs).toBeGreaterThanOrEqual(5_000);
        await store.resolveUncertain(older.key, { applied: false, reason: 'checked' });
        await store.resolveUncertain(newer.key, { applied: false, reason: 'checked' });
        expect((await store.uncertainBacklog()).count).toBe(before.count);
      });

      it('lists keys by state', async () => {
        const a = action();
        const b = action();
        await store.markUncertain(a, await grant(a), 'lost');
        await grant(b);
        const uncertain = await store.list({ state: 'uncertain', limit: 1000 });
        expect(uncertain.map((r) => r.key)).toContain(a.key);
        expect(uncertain.map((r) => r.key)).not.toContain(b.key);
      });

      it('purge deletes old done keys only, and fences never restart', async () => {
        const done = action();
        await store.complete(done, await grant(done), { payload: bytes('x') });
        const doubtful = action();
        await store.markUncertain(doubtful, await grant(doubtful), 'lost');
        const week = 7 * 24 * 60 * 60 * 1000;
        await h.advance(week + 60_000);
        // Below the floor (7 days by default): refused, nothing deleted.
        await expect(store.purge({ olderThanMs: 30_000 })).rejects.toMatchObject({
          code: 'PURGE_BELOW_FLOOR',
          floorMs: week,
        });
        expect((await store.inspect(done.key))?.state).toBe('done');
        // At the floor: no force needed, so any role that runs the store may (a forced purge
        // below it needs the schema owner's role in Postgres: test/store/postgres-roles.test.ts).
        const purged = await store.purge({ olderThanMs: week });
        expect(purged).toBeGreaterThanOrEqual(1);
        expect(await store.inspect(done.key)).toBeUndefined();
        expect(await store.events(done.key)).toEqual([]);
        expect((await store.inspect(doubtful.key))?.state).toBe('uncertain');
        expect((await grant(action({ resource: done.resource }))).fence).toBe(2);
      });
    });

    describe('reconcile starts (one sweeper per store)', () => {
      it('claims each uncertain key once per attempt; again after restartAfterMs or a new attempt', async () => {
        if (!store.claimReconciles) return;
        const a = action();
        const lease = await grant(a);
        await store.markUncertain(a, lease, 'crashed');
        const restartAfterMs = 60_000;
        const claim = async () =>
          (await store.claimReconciles!({ limit: 1000, restartAfterMs }))
            .map((record) => record.key)
            .filter((key) => key === a.key);
        const [first, second] = await Promise.all([claim(), claim()]);
        expect([...first, ...second]).toEqual([a.key]);
        expect(await claim()).toEqual([]);
        await h.advance(restartAfterMs + 1);
        expect(await claim()).toEqual([a.key]);
        await store.resolveUncertain(a.key, { applied: false, reason: 'checked' });
        expect(await claim()).toEqual([]);
        const again = await grant(a);
        await store.markUncertain(a, again, 'crashed again');
        expect(await claim()).toEqual([a.key]);
      });

      it('one sweep leader at a time; it resigns and another leads', async () => {
        if (!store.leadSweep || !store.resignSweep) return;
        const first = {};
        const second = {};
        expect(await store.leadSweep(first)).toBe(true);
        expect(await store.leadSweep(second)).toBe(false);
        expect(await store.leadSweep(first)).toBe(true);
        await store.resignSweep(first);
        expect(await store.leadSweep(second)).toBe(true);
        await store.resignSweep(second);
      });
    });

    describe('pending verdicts (checked by a worker before they decide)', () => {
      async function uncertain(): Promise<Action> {
        const a = action();
        await store.markUncertain(a, await grant(a), 'response lost');
        return a;
      }

      it('a pending verdict leaves the key uncertain until it is judged; accepted, it decides', async () => {
        if (!keepsPendingVerdicts(store)) throw new Error('both bundled stores hold verdicts');
        const a = await uncertain();
        const held = await store.addPendingVerdict(a.key, {
          applied: true,
          result: { payload: bytes('{"chargeId":"ch_1"}') },
          reason: 'seen at the bank',
          by: 'alice',
          identity: 'cli@host',
        });
        if (held.outcome !== 'held') throw new Error(`expected held, got ${held.outcome}`);
        expect(held.verdict).toMatchObject({
          key: a.key,
          fence: 1,
          applied: true,
          reason: 'seen at the bank',
          by: 'alice',
          identity: 'cli@host',
          state: 'pending',
        });
        expect((await store.inspect(a.key))?.state).toBe('uncertain');
        expect(await store.acquire(a, TTL)).toMatchObject({ outcome: 'uncertain' });
        expect(await store.pendingVerdictKeys(1000)).toContain(a.key);
        expect((await store.events(a.key)).at(-1)).toMatchObject({
          from: 'uncertain',
          to: 'uncertain',
          by: 'alice',
          identity: 'cli@host',
        });

        const judged = await store.judgeVerdict(held.verdict.id, { accept: true });
        expect(judged).toMatchObject({ id: held.verdict.id, state: 'accepted' });
        expect(text((await store.inspect(a.key))!.result!.payload)).toBe('{"chargeId":"ch_1"}');
        expect((await store.events(a.key)).at(-1)).toMatchObject({
          from: 'uncertain',
          to: 'done',
          reason: 'seen at the bank',
          by: 'alice',
          identity: 'cli@host',
        });
        expect(await store.pendingVerdictKeys(1000)).not.toContain(a.key);
        // Judged once: a second judgement answers what stands and changes nothing.
        expect(
          await store.judgeVerdict(held.verdict.id, { accept: false, why: 'x' }),
        ).toMatchObject({ state: 'accepted' });
      });

      it('refused, the key stays uncertain, visibly; the next verdict may still decide it', async () => {
        if (!keepsPendingVerdicts(store)) throw new Error('both bundled stores hold verdicts');
        const a = await uncertain();
        const first = await store.addPendingVerdict(a.key, {
          applied: true,
          result: { payload: bytes('{"chargeId":42}') },
          reason: 'typo',
          by: 'bob',
        });
        const second = await store.addPendingVerdict(a.key, {
          applied: false,
          reason: 'not there',
        });
        if (first.outcome !== 'held' || second.outcome !== 'held') throw new Error('not held');
        expect(second.verdict.id).toBeGreaterThan(first.verdict.id);
        expect(
          await store.judgeVerdict(first.verdict.id, {
            accept: false,
            why: 'chargeId: expected string',
          }),
        ).toMatchObject({ state: 'refused', why: 'chargeId: expected string' });
        expect((await store.inspect(a.key))?.state).toBe('uncertain');
        expect((await store.events(a.key)).at(-1)).toMatchObject({
          from: 'uncertain',
          to: 'uncertain',
          reason: 'verdict refused: chargeId: expected string',
          by: 'bob',
        });
        expect(await store.pendingVerdictKeys(1000)).toContain(a.key);
        expect(await store.judgeVerdict(second.verdict.id, { accept: true })).toMatchObject({
          state: 'accepted',
        });
        expect((await store.inspect(a.key))?.state).toBe('free');
        expect((await store.pendingVerdicts(a.key)).map((v) => v.state)).toEqual([
          'refused',
          'accepted',
        ]);
      });

      it('first resolution wins: a verdict held before another decided becomes late, never a second decision', async () => {
        if (!keepsPendingVerdicts(store)) throw new Error('both bundled stores hold verdicts');
        const a = await uncertain();
        const held = await store.addPendingVerdict(a.key, { applied: false, reason: 'not there' });
        if (held.outcome !== 'held') throw new Error('not held');
        await store.resolveUncertain(a.key, {
          applied: true,
          result: { payload: bytes('1') },
          reason: 'through the workflow',
        });
        expect(await store.judgeVerdict(held.verdict.id, { accept: true })).toMatchObject({
          state: 'late',
          why: expect.stringContaining('decided before'),
        });
        expect(text((await store.inspect(a.key))!.result!.payload)).toBe('1');
        // A done key is answered with what stands; nothing is held.
        expect(await store.addPendingVerdict(a.key, { applied: false, reason: 'again' })).toEqual({
          outcome: 'replayed',
          applied: true,
          result: { payload: bytes('1') },
        });
        expect(await store.pendingVerdicts(a.key)).toHaveLength(1);
      });

      it('a pending verdict judges its own attempt only; refusals as resolveUncertain', async () => {
        if (!keepsPendingVerdicts(store)) throw new Error('both bundled stores hold verdicts');
        const a = await uncertain();
        const held = await store.addPendingVerdict(a.key, { applied: false, reason: 'checked 1' });
        if (held.outcome !== 'held') throw new Error('not held');
        await store.resolveUncertain(a.key, { applied: false, reason: 'through the workflow' });
        await store.markUncertain(a, await grant(a), 'lost again');
        expect(await store.pendingVerdictKeys(1000)).not.toContain(a.key);
        expect(await store.judgeVerdict(held.verdict.id, { accept: true })).toMatchObject({
          state: 'late',
          why: expect.stringContaining('fence) 2'),
        });
        expect((await store.inspect(a.key))?.state).toBe('uncertain');
        await expect(
          store.addPendingVerdict(a.key, { applied: false, reason: 'old', fence: 1 }),
        ).rejects.toBeInstanceOf(StaleVerdictError);
        const b = action();
        await grant(b);
        await expect(
          store.addPendingVerdict(b.key, { applied: false, reason: 'x' }),
        ).rejects.toBeInstanceOf(NotUncertainError);
        await expect(
          store.addPendingVerdict('never-seen', { applied: false, reason: 'x' }),
        ).rejects.toBeInstanceOf(NotUncertainError);
        await expect(
          store.addPendingVerdict(a.key, { applied: false, reason: ' ' }),
        ).rejects.toBeInstanceOf(InvalidActionError);
        expect(await store.judgeVerdict(987_654_321, { accept: true })).toBeUndefined();
      });

      it('overtaken, a verdict still pending reads late at once, never pending on a decided key', async () => {
        if (!keepsPendingVerdicts(store)) throw new Error('both bundled stores hold verdicts');
        const a = await uncertain();
        const held = await store.addPendingVerdict(a.key, {
          applied: true,
          result: { payload: bytes('{"chargeId":"ch_1"}') },
          reason: 'no worker knows this effect',
        });
        if (held.outcome !== 'held') throw new Error('not held');
        expect(await store.pendingVerdictCounts([a.key, 'never-seen'])).toEqual(
          new Map([[a.key, 1]]),
        );
        await store.resolveUncertain(a.key, { applied: false, reason: 'through the workflow' });
        expect(await store.pendingVerdicts(a.key)).toEqual([
          expect.objectContaining({
            state: 'late',
            why: expect.stringContaining('decided before'),
          }),
        ]);
        expect(await store.pendingVerdicts(a.key, { waiting: true })).toEqual([]);
        expect(await store.pendingVerdictCounts([a.key])).toEqual(new Map());
      });

      it('withdrawn by a person, with who and why: never judged, and an event says so', async () => {
        if (!keepsPendingVerdicts(store)) throw new Error('both bundled stores hold verdicts');
        const a = await uncertain();
        const held = await store.addPendingVerdict(a.key, { applied: false, reason: 'checked 1' });
        if (held.outcome !== 'held') throw new Error('not held');
        const id = held.verdict.id;
        expect(
          await store.withdrawPendingVerdict('another-key', id, { reason: 'x' }),
        ).toBeUndefined();
        await expect(
          store.withdrawPendingVerdict(a.key, id, { reason: ' ' }),
        ).rejects.toBeInstanceOf(InvalidActionError);
        const withdrawn = await store.withdrawPendingVerdict(a.key, id, {
          reason: 'carol found the charge',
          by: 'carol',
          identity: 'cli@host',
        });
        expect(withdrawn).toMatchObject({
          withdrawn: true,
          verdict: { id, state: 'withdrawn', why: 'withdrawn by carol: carol found the charge' },
        });
        expect(
          await store.withdrawPendingVerdict(a.key, id, { reason: 'again', by: 'dave' }),
        ).toMatchObject({
          withdrawn: false,
          verdict: { state: 'withdrawn', why: expect.stringContaining('carol') },
        });
        expect((await store.events(a.key)).at(-1)).toMatchObject({
          from: 'uncertain',
          to: 'uncertain',
          by: 'carol',
          identity: 'cli@host',
          reason: expect.stringContaining(`#${id} withdrawn`),
        });
        expect(await store.judgeVerdict(id, { accept: true })).toMatchObject({
          state: 'withdrawn',
        });
        expect((await store.inspect(a.key))?.state).toBe('uncertain');
        expect(await store.pendingVerdictKeys(1000)).not.toContain(a.key);
      });

      it(`at most ${MAX_PENDING_VERDICTS} pending per attempt: the next is refused, nothing written; read a page at a time`, async () => {
        if (!keepsPendingVerdicts(store)) throw new Error('both bundled stores hold verdicts');
        const a = await uncertain();
        const ids: number[] = [];
        for (let i = 0; i < MAX_PENDING_VERDICTS; i++) {
          const held = await store.addPendingVerdict(a.key, { applied: false, reason: `v${i}` });
          if (held.outcome !== 'held') throw new Error('not held');
          ids.push(held.verdict.id);
        }
        const events = (await store.events(a.key)).length;
        const full = await store
          .addPendingVerdict(a.key, { applied: false, reason: 'one more' })
          .then(
            () => undefined,
            (error: unknown) => error,
          );
        expect(full).toBeInstanceOf(PendingVerdictsFullError);
        expect(full).toMatchObject({ code: 'PENDING_VERDICTS_FULL', key: a.key, fence: 1 });
        expect((await store.events(a.key)).length).toBe(events);
        const first = await store.pendingVerdicts(a.key, { limit: 30 });
        expect(first.map((v) => v.id)).toEqual(ids.slice(0, 30));
        const next = await store.pendingVerdicts(a.key, { afterId: first.at(-1)!.id, limit: 30 });
        expect(next.map((v) => v.id)).toEqual(ids.slice(30, 60));
        await expect(store.pendingVerdicts(a.key, { limit: 1001 })).rejects.toBeInstanceOf(
          InvalidActionError,
        );
        // Withdrawn, one makes room again.
        await store.withdrawPendingVerdict(a.key, ids[0]!, { reason: 'duplicate' });
        expect(
          await store.addPendingVerdict(a.key, { applied: false, reason: 'fits' }),
        ).toMatchObject({ outcome: 'held' });
      });
    });

    describe('a Runner on this store', () => {
      it('a definite refusal (NotAppliedError) releases the key: free, resource free, the same key applies next', async () => {
        const runner = new Runner(store, { ttlMs: TTL });
        const a = action();
        const refused = await runner.execute(a, async () => {
          throw new NotAppliedError('card declined', { type: 'CardDeclined' });
        });
        expect(refused).toMatchObject({ outcome: 'failed', definite: true });
        expect((await store.inspect(a.key))?.state).toBe('free');
        expect((await store.list({ state: 'uncertain' })).map((r) => r.key)).not.toContain(a.key);
        const next = await runner.execute(a, async () => ({ payload: bytes('paid') }));
        expect(next.outcome).toBe('applied');
        expect(next.outcome === 'applied' && next.lease.fence).toBe(2);
      });
    });

    describe('bad input is refused and nothing is written', () => {
      const cases: Array<[string, Partial<Action>]> = [
        ['empty key', { key: '' }],
        ['empty resource', { resource: '' }],
        ['NUL in key', { key: 'a\0b' }],
        ['lone surrogate in key', { key: 'a\uD800' }],
        ['oversized key', { key: 'k'.repeat(513) }],
        ['oversized resource', { resource: 'r'.repeat(257) }],
        ['oversized payload', { payload: new Uint8Array(1024 * 1024 + 1) }],
        ['unknown retrySafety', { retrySafety: 'maybe' as never }],
      ];
      it.each(cases)('%s', async (_label, overrides) => {
        const a = action(overrides);
        await expect(store.acquire(a, TTL)).rejects.toBeInstanceOf(InvalidActionError);
        if (a.key) expect(await store.inspect(a.key)).toBeUndefined();
      });

      it.each([0, -1, Number.NaN, Number.POSITIVE_INFINITY, 1.5])('ttl %s', async (ttl) => {
        const a = action();
        await expect(store.acquire(a, ttl)).rejects.toMatchObject({ code: 'INVALID_ACTION' });
        expect(await store.inspect(a.key)).toBeUndefined();
      });

      it('SQL metacharacters and non-ASCII are ordinary text', async () => {
        const a = action({
          key: `'); DROP TABLE keys; -- ${seq} 鍵 🔑`,
          resource: `r' OR '1'='1 ${seq} ü`,
        });
        await store.complete(a, await grant(a), { payload: bytes('ok') });
        expect((await store.inspect(a.key))?.resource).toBe(a.resource);
        const replay = await store.acquire(a, TTL);
        expect(replay.outcome === 'replayed' && text(replay.result.payload)).toBe('ok');
      });
    });
  });
}
