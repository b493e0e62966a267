import type pg from 'pg';
import { checkBreakerGroup } from '../core/breaker.js';
import { InvalidActionError } from '../core/errors.js';
import type { TransactionIsolation } from '../core/store.js';
import type { Fence, Lease, RetrySafety } from '../core/types.js';
import type { ProbeAnswer } from '../protocol/wire.js';
import type { BreakerOptions } from './breaker-gate.js';
import type { ResultCheck } from './result-check.js';

/** What an effect's apply gets: the fence for every downstream write, and a signal that fires on lease loss or activity cancellation. */
export interface EffectContext<P> {
  /** The idempotency key; pass it downstream too where the downstream deduplicates. */
  key: string;
  /** `lease.fence` goes to every FencedSink write. */
  lease: Lease;
  /** Aborted (reason LeaseLostError) when the lease is lost, or when Temporal cancels the activity. Stop writing. */
  signal: AbortSignal;
  /** What `prepare` returned (undefined without a prepare). */
  prepared: P;
}

/**
 * What a probe gets. `fence` is newer than any fence the uncertain attempt
 * held: read the downstream through your FencedSink's `readFenced(resource,
 * fence, read)`, so a holder that is only paused cannot land its write after
 * you answered "not applied" (a plain read leaves that window open).
 */
interface ProbeContext {
  key: string;
  resource: string;
  fence: Fence;
}

/**
 * One side effect the host guards. `input` and the result travel as JSON
 * through Temporal and the store.
 */
export interface SideEffectDefinition<I = unknown, R = unknown, P = undefined> {
  /** Not transactional: the downstream is outside the store's database (see TransactionalEffectDefinition). */
  transactional?: false;
  /** What the lease makes exclusive (one live holder at a time), e.g. `account:42`. */
  resource(input: I): string;
  /**
   * Bounds this effect's attempts in flight within one worker, per key of your
   * choice (default: one bound for the effect), e.g. `{ limit: 4, key: (i) => i.model }`
   * for "at most 4 calls per LLM model". A full key fails the attempt at once with
   * the retryable `SideEffectTooManyInFlight`, before any lease is taken, so
   * Temporal backs off instead of piling attempts up in the worker.
   * @default no bound
   */
  inFlight?: { limit: number; key?: (input: I) => string };
  /**
   * Whether a failed apply may simply be retried. `unknown` and `unsafe`: a failed or
   * interrupted apply blocks the key until reconciled; `safe`: it frees the key.
   * @default 'unknown'
   */
  retrySafety?: RetrySafety;
  /**
   * Error types that mean "the downstream refused, nothing took effect", e.g. `['CardDeclined']`:
   * an apply error whose ApplicationFailure `type` (else its `name`) is listed releases the key
   * and fails the workflow's call, non-retryable, with that type and details; nobody is paged.
   * `NotAppliedError` always counts. Any other error still blocks the key as uncertain.
   * @default none: only `NotAppliedError`
   */
  definiteFailures?: readonly string[];
  /**
   * The breaker of this effect's provider: once `threshold` attempts of its `group` end uncertain
   * within `windowMs`, no new attempt of the group starts (the call fails with the retryable
   * `SideEffectPaused` and waits) until, after `coolDownMs`, one attempt goes through and applies.
   * Without it, a provider that takes requests and then times out leaves every attempt uncertain,
   * each waiting for a person. `true` takes the plugin's defaults (`breaker` of the plugin
   * options); `false` turns off the plugin's `effects: 'all'`. Needs a store that keeps breakers
   * (both bundled stores do). See docs/operations.md, "Outages".
   * @default off, unless the plugin's `breaker.effects` is `'all'`
   */
  breaker?: boolean | BreakerOptions;
  /**
   * Slow work that must not touch the outside world; the lease is re-checked after it. The lease
   * is renewed and heartbeated during it too.
   * @default none: the grant goes straight to apply
   */
  prepare?(input: I, context: { key: string; signal: AbortSignal }): Promise<P>;
  /** The side effect. Returns a JSON-serialisable result, recorded and replayed byte for byte. */
  apply(input: I, context: EffectContext<P>): Promise<R>;
  /**
   * How to check a result this apply did not return itself: a person's `applied: true` verdict
   * (signal, Update, `sideeffect resolve`) and a probe's answer are refused, with the reason and
   * before anything is recorded, unless their result passes. `'void'` for an effect that returns
   * nothing, a Standard Schema value (a zod or valibot schema), or a function. Judged by the
   * worker that records the verdict (the reconcile activities), since workflow code cannot run it.
   * @default no check: any JSON result is recorded
   */
  result?: ResultCheck;
  /**
   * Asks the downstream whether `key` took effect, so an uncertain key is
   * reconciled without a person. Answer `undefined` when it cannot tell.
   * @default none: every uncertain key waits for a person
   */
  probe?(input: I, context: ProbeContext): Promise<ProbeAnswer<R> | undefined>;
}

/** What a transactional effect's apply gets: the store's open transaction and the grant it runs under. */
interface TransactionalEffectContext<Tx> {
  /** The store's transaction: run every statement of the effect on it; never commit or roll back. */
  tx: Tx;
  key: string;
  /** The fence of this grant (handy as a version column downstream). */
  fence: Fence;
  /** Fires when Temporal cancels the activity: throw, and everything rolls back. */
  signal: AbortSignal;
}

/**
 * An effect whose downstream is a table in the store's own Postgres: acquire,
 * its statements and complete commit in ONE transaction, so a crash rolls all
 * of it back and the key never becomes uncertain (exactly once, one commit).
 * A throwing apply rolls back and fails the attempt, which Temporal retries.
 * Needs PgStore (else NotTransactionalError at worker start). No prepare, no
 * probe, no retrySafety: with nothing ever uncertain they have nothing to do.
 * While it runs, other attempts on its resource wait for its commit.
 */
export interface TransactionalEffectDefinition<I = unknown, R = unknown, Tx = pg.PoolClient> {
  transactional: true;
  resource(input: I): string;
  /** As for SideEffectDefinition: bounds attempts in flight within one worker. */
  inFlight?: { limit: number; key?: (input: I) => string };
  /**
   * The isolation level of the transaction `apply` runs in. Choose a stricter one when apply's own
   * reads decide what it writes (a balance check): under read committed a concurrent commit can
   * change them mid-transaction. A serialization failure runs the whole attempt again, a few times.
   * @default 'read committed'
   */
  isolation?: TransactionIsolation;
  /** The effect's statements, on `tx`. Returns a JSON-serialisable result, recorded in the same commit. */
  apply(input: I, context: TransactionalEffectContext<Tx>): Promise<R>;
  prepare?: never;
  probe?: never;
  /** Never uncertain, so never counted by a breaker. */
  breaker?: never;
  retrySafety?: never;
  result?: never;
}

/** Any effect, as the registry holds them. */
export type AnyEffect =
  | SideEffectDefinition<never, unknown, unknown>
  | TransactionalEffectDefinition<never, unknown, pg.PoolClient>;

/**
 * Declares one guarded side effect; an identity function that gives `apply` and `probe` their
 * types from `resource`'s input, and lets workflows type their calls with `typeof effects`.
 * A breaker `group` that is empty or longer than the store keeps (256 UTF-8 bytes) throws an
 * `InvalidActionError` (field `breaker.group`) here, where the effect is written, not at the first breaker write.
 *
 * @example
 * ```ts
 * export const effects = {
 *   charge: defineEffect({
 *     resource: (input: { card: string; cents: number }) => `card:${input.card}`,
 *     async apply(input, { key, lease }) {
 *       return bank.writeFenced(`card:${input.card}`, lease.fence, (tx) => insertCharge(tx, key, input));
 *     },
 *   }),
 * };
 * ```
 */
export function defineEffect<I, R, Tx = pg.PoolClient>(
  definition: TransactionalEffectDefinition<I, R, Tx>,
): TransactionalEffectDefinition<I, R, Tx>;
export function defineEffect<I, R, P = undefined>(
  definition: SideEffectDefinition<I, R, P>,
): SideEffectDefinition<I, R, P>;
export function defineEffect(definition: AnyEffect): AnyEffect {
  refuseTransactionalBreaker(definition, 'breaker');
  const breaker: unknown = definition.breaker;
  if (typeof breaker === 'object' && breaker !== null && 'group' in breaker) {
    if (breaker.group !== undefined) checkBreakerGroup(breaker.group, 'breaker.group');
  }
  return definition;
}

/**
 * A transactional effect is never uncertain, so a breaker would never open on it: declared there,
 * it promises a protection that does not exist. Refused where the effect is made, and again at
 * worker start for a definition that skipped {@link defineEffect}.
 */
export function refuseTransactionalBreaker(effect: AnyEffect, field: string): void {
  if (effect.transactional && (effect as { breaker?: unknown }).breaker !== undefined)
    throw new InvalidActionError(
      field,
      'a transactional effect is never uncertain, so no breaker counts it: drop `breaker`',
    );
}
