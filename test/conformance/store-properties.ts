import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Lease, RetrySafety, SideEffectError } from '../../src/core/index.js';
import { bytes, text } from '../support/bytes.js';
import type { StoreFactory } from './store-conformance.js';
import { type ModelAnswer, StoreModel } from './store-model.js';

const TTL = 1_000;
const SAFETIES: RetrySafety[] = ['unknown', 'safe', 'unsafe', 'unknown'];

type Op =
  | { op: 'acquire'; key: number; applying: boolean }
  | { op: 'renew'; key: number; lease: number; applying: boolean }
  | { op: 'complete'; key: number; lease: number; value: number }
  | { op: 'markUncertain'; key: number; lease: number }
  | { op: 'release'; key: number; lease: number }
  | { op: 'resolve'; key: number; applied: boolean; value: number }
  | { op: 'sweep' }
  | { op: 'advance'; ms: number };

const key = fc.integer({ min: 0, max: 3 });
const lease = fc.nat({ max: 3 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({ op: fc.constant('acquire' as const), key, applying: fc.boolean() }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ op: fc.constant('renew' as const), key, lease, applying: fc.boolean() }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ op: fc.constant('complete' as const), key, lease, value: fc.nat(9) }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('markUncertain' as const), key, lease }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('release' as const), key, lease }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('resolve' as const),
      key,
      applied: fc.boolean(),
      value: fc.nat(9),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ op: 'sweep' as const }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('advance' as const),
      ms: fc.constantFrom(1, TTL / 2, TTL - 1, TTL, TTL + 1, 5 * TTL),
    }),
  },
);

/**
 * Random operation sequences, clock jumps included, run against a store and
 * the reference model side by side. Besides agreeing with the model at every
 * step, the store must keep the invariants that make the library worth using.
 */
export function describeStoreProperties(
  name: string,
  factory: StoreFactory,
  numRuns: number,
): void {
  describe(`Store properties: ${name}`, () => {
    it(
      `agrees with the model and keeps the invariants over ${numRuns} random sequences`,
      async () => {
        const h = await factory();
        let run = 0;
        try {
          await fc.assert(
            fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 40 }), async (ops) => {
              run += 1;
              await checkSequence(h, `p${run}-${Math.random().toString(36).slice(2, 8)}`, ops);
            }),
            { numRuns },
          );
        } finally {
          await h.close();
        }
        // A sequence is up to 40 store calls: on a loaded machine, 1,000 of them outlast 60 s.
      },
      Math.max(60_000, numRuns * 150),
    );
  });
}

async function checkSequence(
  h: Awaited<ReturnType<StoreFactory>>,
  run: string,
  ops: Op[],
): Promise<void> {
  const { store } = h;
  const bindings = SAFETIES.map((safety, i) => ({
    key: `${run}/k${i}`,
    resource: `${run}/r${i % 2}`,
    safety,
  }));
  const model = new StoreModel(bindings);
  const actions = bindings.map((b) => ({
    key: b.key,
    resource: b.resource,
    retrySafety: b.safety,
  }));
  const leases: Lease[][] = bindings.map(() => []);
  const lastFence = new Map<string, number>();
  const doneResult = new Map<string, string>();
  const applyStarts = bindings.map(() => 0);
  const notAppliedVerdicts = bindings.map(() => 0);
  /** The latest lease expiry the store granted on each resource, with the key that holds it. */
  const liveUntil = new Map<string, { key: string; expiresAt: number; fence: number }>();

  const pick = (k: number, i: number): Lease | undefined => {
    const list = leases[k]!;
    return list[list.length - 1 - (i % Math.max(1, list.length))];
  };

  for (const op of ops) {
    if (op.op === 'advance') {
      model.now += op.ms;
      await h.advance(op.ms);
      continue;
    }
    if (op.op === 'sweep') {
      model.sweep();
      await store.sweep();
      continue;
    }
    const k = op.key;
    const a = actions[k]!;
    const stateBefore = model.keys.get(a.key)!.state;
    let expected: ModelAnswer;
    let actual: ModelAnswer;
    switch (op.op) {
      case 'acquire': {
        const previous = liveUntil.get(a.resource);
        const previousEnded = !previous || !model.holds(previous.key, previous.fence);
        expected = model.acquire(a.key, TTL, op.applying);
        actual = await answer(async () => {
          const acq = await store.acquire(a, TTL, { applying: op.applying });
          if (acq.outcome === 'granted') {
            leases[k]!.push(acq.lease);
            // At most one live holder: a grant only once the previous lease ran out or ended.
            const grantedAt = acq.lease.expiresAt - TTL;
            expect(previousEnded || previous!.expiresAt <= grantedAt).toBe(true);
            // Fences strictly increase per resource.
            expect(acq.lease.fence).toBeGreaterThan(lastFence.get(a.resource) ?? 0);
            lastFence.set(a.resource, acq.lease.fence);
            liveUntil.set(a.resource, {
              key: a.key,
              expiresAt: acq.lease.expiresAt,
              fence: acq.lease.fence,
            });
            if (op.applying) applyStarts[k]! += 1;
            return { kind: 'applied', fence: acq.lease.fence };
          }
          if (acq.outcome === 'replayed')
            return { kind: 'replayed', result: text(acq.result.payload) };
          // An uncertain key is never granted.
          if (stateBefore === 'uncertain') expect(acq.outcome).toBe('uncertain');
          return { kind: acq.outcome };
        });
        break;
      }
      case 'renew': {
        const l = pick(k, op.lease);
        if (!l) continue;
        expected = model.renew(a.key, l.fence, TTL, op.applying);
        actual = await answer(async () => {
          const renewed = await store.renew(a, l, TTL, { applying: op.applying });
          liveUntil.set(a.resource, {
            key: a.key,
            expiresAt: renewed.expiresAt,
            fence: renewed.fence,
          });
          if (op.applying && stateBefore === 'held') applyStarts[k]! += 1;
          return { kind: 'ok' };
        });
        break;
      }
      case 'complete': {
        const l = pick(k, op.lease);
        if (!l) continue;
        expected = model.complete(a.key, l.fence, String(op.value));
        actual = await answer(async () => ({
          kind: 'replayed',
          result: text((await store.complete(a, l, { payload: bytes(String(op.value)) })).payload),
        }));
        break;
      }
      case 'markUncertain': {
        const l = pick(k, op.lease);
        if (!l) continue;
        expected = model.markUncertain(a.key, l.fence);
        actual = await answer(async () => {
          await store.markUncertain(a, l, 'test');
          return { kind: 'ok' };
        });
        break;
      }
      case 'release': {
        const l = pick(k, op.lease);
        // The Runner never releases an apply that may have landed unless it is declared safe.
        if (!l || (stateBefore === 'applying' && a.retrySafety !== 'safe')) continue;
        expected = model.release(a.key, l.fence);
        actual = await answer(async () => {
          await store.release(a, l);
          return { kind: 'ok' };
        });
        break;
      }
      case 'resolve': {
        expected = model.resolve(a.key, op.applied, String(op.value));
        actual = await answer(async () => {
          const verdict = await store.resolveUncertain(a.key, {
            applied: op.applied,
            result: { payload: bytes(String(op.value)) },
            reason: 'property test',
          });
          if (!verdict.applied) {
            notAppliedVerdicts[k]! += 1;
            return { kind: 'ok' };
          }
          return { kind: 'replayed', result: text(verdict.result!.payload) };
        });
        break;
      }
    }
    expect(actual, `${op.op} on ${a.key} (state was ${stateBefore})`).toEqual(expected);

    for (const [i, b] of bindings.entries()) {
      const record = await store.inspect(b.key);
      const modelKey = model.keys.get(b.key)!;
      expect(record?.state ?? 'free').toBe(modelKey.state);
      // A done key's result never changes.
      if (modelKey.state === 'done') {
        const result = text(record!.result!.payload);
        expect(result).toBe(doneResult.get(b.key) ?? result);
        doneResult.set(b.key, result);
      }
      // No key declared unknown/unsafe is applied twice, unless a verdict said the first never landed.
      if (b.safety !== 'safe')
        expect(applyStarts[i]!).toBeLessThanOrEqual(1 + notAppliedVerdicts[i]!);
    }
  }
}

async function answer(run: () => Promise<ModelAnswer>): Promise<ModelAnswer> {
  try {
    return await run();
  } catch (error) {
    const code = (error as SideEffectError).code;
    if (!code) throw error;
    return { kind: 'error', code };
  }
}
