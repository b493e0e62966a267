/**
 * Fences only grow per resource across both modes (issue 47, item 4), through the public API only,
 * so it holds for whatever design issues them next: random mixes of plain grants (`acquire`, then
 * complete, release, mark uncertain, or left to expire) and transactional grants
 * (`executeInTransaction`, committed or rolled back), on a few resources, one after another and
 * all at once.
 *
 * Sequentially, a grant's fence is larger than every fence granted before it on its resource that
 * stayed (a plain grant, a transactional one that committed), and not smaller than one rolled
 * back. At once, the same for every grant that returned before another started (real-time order),
 * and no two grants that stayed share a fence.
 *
 * `reissued` counts grants whose fence an earlier, rolled-back transactional grant of the resource
 * had already been given: under the resource-row lease a rollback takes its fence back and the
 * next grant gets it again (its writes, rolled back with it, never reached anyone), printed; under
 * the key-row lease (migration 0025) fences come from a sequence, and it must be 0.
 */
import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ContendedError, FenceStaleError, type TransactionContext } from '../../src/core/index.js';
import { bytes } from '../support/bytes.js';
import { sized } from '../support/tier.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

const TTL = 1_000;
const RESOURCES = 3;

type Op =
  | { mode: 'plain'; resource: number; after: 'complete' | 'release' | 'uncertain' | 'keep' }
  | { mode: 'transactional'; resource: number; after: 'commit' | 'roll back' }
  | { mode: 'advance' };

const resource = fc.nat({ max: RESOURCES - 1 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      mode: fc.constant('plain' as const),
      resource,
      after: fc.constantFrom(
        'complete' as const,
        'release' as const,
        'uncertain' as const,
        'keep' as const,
      ),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      mode: fc.constant('transactional' as const),
      resource,
      after: fc.constantFrom('commit' as const, 'roll back' as const),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ mode: 'advance' as const }) },
);

/** One grant as the caller saw it: its fence, whether it stayed, when it was asked and answered. */
interface Grant {
  resource: number;
  fence: number;
  stayed: boolean;
  asked: number;
  answered: number;
}

class RolledBack extends Error {}

describe.each(['resource-row', 'key-row'] as const)(
  'PgStore fences only grow per resource, plain and transactional grants mixed (%s lease)',
  (lease) => {
    let h: PgHarness;
    let run = 0;
    let reissued = 0;
    let sequentialGrants = 0;
    let concurrentGrants = 0;
    beforeAll(async () => {
      h = await pgHarness('pg_fence_order', { lease });
    });
    afterAll(async () => {
      console.log('fence order', { lease, sequentialGrants, reissued, concurrentGrants });
      await h?.close();
    });

    /** Runs one op; the grant it got, if any. Keys are fresh per op: every op may be granted. */
    const perform = async (op: Op, prefix: string, i: number): Promise<Grant | undefined> => {
      if (op.mode === 'advance') {
        await h.advance(TTL + 1);
        return undefined;
      }
      const action = { key: `${prefix}-${i}`, resource: `${prefix}-r${op.resource}` };
      const asked = performance.now();
      if (op.mode === 'plain') {
        const got = await h.store.acquire(action, TTL);
        if (got.outcome !== 'granted') return undefined;
        const { lease } = got;
        try {
          if (op.after === 'complete')
            await h.store.complete(action, lease, { payload: bytes('ok') });
          if (op.after === 'release') await h.store.release(action, lease);
          if (op.after === 'uncertain') await h.store.markUncertain(action, lease, 'property test');
        } catch (error) {
          // At once, an `advance` may expire the lease and another grant take the resource over
          // (or hold it, transactional, past lockWaitMs).
          if (!(error instanceof FenceStaleError || error instanceof ContendedError)) throw error;
        }
        return {
          resource: op.resource,
          fence: lease.fence,
          stayed: true,
          asked,
          answered: performance.now(),
        };
      }
      let fence: number | undefined;
      const execution = await h.store.executeInTransaction(
        action,
        TTL,
        async (context: TransactionContext<pg.PoolClient>) => {
          fence = context.fence;
          if (op.after === 'roll back') throw new RolledBack();
          return { payload: bytes('ok') };
        },
      );
      if (fence === undefined) return undefined;
      const stayed = execution.outcome === 'applied';
      if (!stayed && !(execution.outcome === 'failed' && execution.error instanceof RolledBack))
        throw new Error(`unexpected ${execution.outcome}`, { cause: execution });
      return { resource: op.resource, fence, stayed, asked, answered: performance.now() };
    };

    /** Counts grants and reissued fences; returns the per-resource violations of sequential order. */
    const judgeSequential = (seen: Grant[]): string[] => {
      const bad: string[] = [];
      for (let r = 0; r < RESOURCES; r++) {
        let highestStayed = 0;
        let highest = 0;
        const rolledBack = new Set<number>();
        for (const g of seen.filter((x) => x.resource === r)) {
          sequentialGrants += 1;
          if (rolledBack.has(g.fence)) reissued += 1;
          if (g.fence <= highestStayed || g.fence < highest)
            bad.push(`r${r}: fence ${g.fence} after ${highestStayed} (stayed), ${highest} (any)`);
          highest = Math.max(highest, g.fence);
          if (g.stayed) highestStayed = Math.max(highestStayed, g.fence);
          else rolledBack.add(g.fence);
        }
      }
      return bad;
    };

    it('sequentially: every grant above every earlier one that stayed', async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 30 }), async (ops) => {
          run += 1;
          const seen: Grant[] = [];
          for (const [i, op] of ops.entries()) {
            const g = await perform(op, `seq${run}`, i);
            if (g) seen.push(g);
          }
          expect(judgeSequential(seen)).toEqual([]);
        }),
        { numRuns: sized(60, 300) },
      );
    }, 300_000);

    it('concurrently: above every grant answered before it was asked, no fence that stayed given twice', async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(opArb, { minLength: 2, maxLength: 24 }), async (ops) => {
          run += 1;
          const prefix = `con${run}`;
          const seen = (await Promise.all(ops.map((op, i) => perform(op, prefix, i)))).filter(
            (g): g is Grant => g !== undefined,
          );
          const bad: string[] = [];
          for (const later of seen) {
            for (const earlier of seen) {
              if (earlier === later || earlier.resource !== later.resource) continue;
              if (earlier.answered >= later.asked) {
                if (earlier.stayed && later.stayed && earlier.fence === later.fence)
                  bad.push(`r${later.resource}: fence ${later.fence} given twice`);
                continue;
              }
              if (later.fence < earlier.fence || (earlier.stayed && later.fence === earlier.fence))
                bad.push(`r${later.resource}: fence ${later.fence} after ${earlier.fence}`);
            }
          }
          concurrentGrants += seen.length;
          expect(bad).toEqual([]);
        }),
        { numRuns: sized(30, 150) },
      );
    }, 300_000);

    it("no fence is given twice under the key-row lease, a rolled-back grant's included", () => {
      expect(sequentialGrants).toBeGreaterThan(0);
      // Under the resource-row lease `reissued` is printed above: a rollback gives its fence back.
      if (lease === 'key-row') expect(reissued).toBe(0);
    });
  },
);
