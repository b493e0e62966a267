import type { MetricMeter } from '@temporalio/common';
import {
  type BreakerAdmission,
  type BreakerOutcome,
  type BreakerPolicy,
  type BreakerRecord,
  type BreakerState,
  type BreakerStore,
  type BreakerTransition,
  checkBreakerPolicy,
  defaultBreakerPolicy,
} from '../core/breaker.js';
import { BreakerOpenError, InvalidActionError } from '../core/errors.js';
import type { AttemptBreaker, Execution } from '../core/runner.js';
import type { Fence, Key } from '../core/types.js';
import { BREAKER_STATE_METRIC, BREAKER_TRANSITIONS_METRIC } from '../protocol/metrics.js';

/**
 * An effect's breaker: its provider group (effects naming the same group share one breaker) and
 * thresholds; unset fields take the plugin's `breaker` defaults, then
 * the library's (5 uncertain in 60 s, 30 s cool-down, at most 10 min).
 */
export type BreakerOptions = Partial<BreakerPolicy>;

/** The plugin-level default of every effect's breaker, and how the worker reads breakers. */
export interface BreakerDefaults extends Omit<BreakerOptions, 'group'> {
  /**
   * `all`: every non-transactional effect has a breaker unless it says `breaker: false`;
   * `opted-in`: only effects that declare `breaker`.
   * @default 'opted-in'
   */
  effects?: 'opted-in' | 'all';
  /**
   * How long this worker trusts the store's "closed" before asking again, so a closed breaker
   * costs no round trip per attempt. An open breaker reaches this worker's new attempts at most
   * this late (the bound in docs/operations.md, "Outages"); 0 asks the store for every attempt.
   * @default 100
   */
  closedCacheMs?: number;
}

/**
 * The policy of `name`'s breaker, or undefined when it has none. Checked at worker start, so a
 * bad threshold fails there instead of on every attempt.
 */
export function breakerPolicy(
  name: string,
  declared: boolean | BreakerOptions | undefined,
  defaults: BreakerDefaults = {},
): BreakerPolicy | undefined {
  const on = declared === undefined ? defaults.effects === 'all' : declared !== false;
  if (!on) return undefined;
  const own = typeof declared === 'object' && declared !== null ? declared : {};
  const { effects: _effects, closedCacheMs: _cache, ...shared } = defaults;
  try {
    return checkBreakerPolicy({
      ...defaultBreakerPolicy,
      group: name,
      ...definedOnly(shared),
      ...definedOnly(own),
    });
  } catch (error) {
    if (error instanceof InvalidActionError)
      throw new InvalidActionError(`effects.${name}.${error.field}`, error.message);
    throw error;
  }
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

const STATE_VALUE: Record<BreakerState, number> = { closed: 0, 'half-open': 1, open: 2 };

/**
 * One worker's door to the store's breakers: asks the store whether a new attempt may start
 * (trusting a "closed" answer for `closedCacheMs`, so the closed path costs nothing), records how
 * admitted attempts ended, and logs, counts and gauges every transition it sees.
 */
export class BreakerGate {
  readonly #store: BreakerStore;
  readonly #closedCacheMs: number;
  /**
   * Per group, until when (this process's clock) the store's "closed" is trusted, and whether a
   * read of it is on its way. Trusted attempts never wait for the store: past half the time a
   * read in the background renews the trust, so callers stay in step (a caller that waited for
   * the store fell out of its statement batches, and cost a third of the throughput at 8).
   */
  readonly #closed = new Map<string, { until: number; reading: boolean }>();
  /** The reads of a group's breaker on their way. */
  readonly #reads = new Map<string, Promise<BreakerRecord | undefined>>();

  constructor(store: BreakerStore, closedCacheMs = 100) {
    if (!Number.isSafeInteger(closedCacheMs) || closedCacheMs < 0)
      throw new InvalidActionError(
        'breaker.closedCacheMs',
        `must be a non-negative integer, got ${String(closedCacheMs)}`,
      );
    this.#store = store;
    this.#closedCacheMs = closedCacheMs;
  }

  /** Whether this worker still trusts the store's last "closed" for `group`: no need to ask. */
  trustsClosed(group: string): boolean {
    const trust = this.#closed.get(group);
    if (trust === undefined) return false;
    const now = Date.now();
    if (now >= trust.until) return false;
    if (!trust.reading && now >= trust.until - this.#closedCacheMs / 2) {
      trust.reading = true;
      this.#read(group).then(
        (record) => {
          if (record === undefined || record.state === 'closed') this.#trust(group);
          else this.#closed.delete(group);
        },
        () => {
          trust.reading = false;
        },
      );
    }
    return true;
  }

  /**
   * Whether a new attempt of the group may start. Untrusted, the group's breaker is read first,
   * once for every caller asking meanwhile (they go on together, as they came); only a breaker
   * that is not closed is asked per attempt, which may make this one the half-open attempt.
   */
  async admit(policy: BreakerPolicy, key: Key, seen: Observer): Promise<BreakerAdmission> {
    if (this.trustsClosed(policy.group)) return { admitted: true, probe: false };
    const record = await this.#read(policy.group);
    if (record === undefined || record.state === 'closed') {
      this.#trust(policy.group);
      this.#observe(policy.group, record, undefined, seen);
      return { admitted: true, probe: false };
    }
    const admission = await this.#store.admitAttempt(policy, key);
    if (admission.admitted && !admission.probe) this.#trust(policy.group);
    else this.#closed.delete(policy.group);
    this.#observe(policy.group, admission.record, admission.transition, seen);
    return admission;
  }

  /**
   * The breaker of one call's attempt, for {@link Runner.execute}: admits it (refusing with
   * {@link BreakerOpenError}) and records how it ended, remembering between the two whether it
   * was the half-open attempt. A trusted "closed" answers at once, with no turn of the loop.
   */
  attempt(policy: BreakerPolicy, key: Key, seen: Observer): AttemptBreaker {
    let admitted: { probe: boolean; fence: Fence } | undefined;
    return {
      admit: (lease) => {
        if (this.trustsClosed(policy.group)) {
          admitted = { probe: false, fence: lease.fence };
          return;
        }
        return this.admit(policy, key, seen).then((admission) => {
          if (!admission.admitted)
            throw new BreakerOpenError(admission.record, admission.retryAt, admission.retryAfterMs);
          admitted = { probe: admission.probe, fence: lease.fence };
        });
      },
      record: (execution) => {
        if (admitted === undefined) return;
        const outcome = breakerOutcome(execution, admitted.probe);
        if (outcome === undefined) return;
        return this.record(policy, { key, fence: admitted.fence, outcome }, seen).catch(
          (error: unknown) =>
            // The outcome stands; a probe's slot unrecorded runs out after one cool-down.
            seen.log(`breaker "${policy.group}": outcome not recorded`, {
              key,
              outcome,
              error: error instanceof Error ? error.message : String(error),
            }),
        );
      },
    };
  }

  #trust(group: string): void {
    if (this.#closedCacheMs > 0)
      this.#closed.set(group, { until: Date.now() + this.#closedCacheMs, reading: false });
  }

  /** The group's breaker as the store has it, one read for all who ask at once. */
  #read(group: string): Promise<BreakerRecord | undefined> {
    let reading = this.#reads.get(group);
    if (reading === undefined) {
      reading = this.#store.breaker(group).finally(() => this.#reads.delete(group));
      this.#reads.set(group, reading);
    }
    return reading;
  }

  async record(
    policy: BreakerPolicy,
    attempt: { key: Key; fence: Fence; outcome: BreakerOutcome },
    seen: Observer,
  ): Promise<void> {
    const answer = await this.#store.recordOutcome(policy, attempt);
    if (answer.record.state !== 'closed') this.#closed.delete(policy.group);
    this.#observe(policy.group, answer.record, answer.transition, seen);
  }

  #observe(
    group: string,
    record: BreakerRecord | undefined,
    transition: BreakerTransition | undefined,
    seen: Observer,
  ): void {
    const state = record?.state ?? 'closed';
    seen.meter
      .createGauge(BREAKER_STATE_METRIC, 'int', '', 'breaker state: 0 closed, 1 half-open, 2 open')
      .set(STATE_VALUE[state], { group });
    if (transition === undefined) return;
    seen.meter
      .createCounter(BREAKER_TRANSITIONS_METRIC, 'transitions', 'breaker transitions')
      .add(1, { group, from: transition.from, to: transition.to });
    seen.log(`breaker "${group}" ${transition.from} -> ${transition.to}: ${transition.reason}`, {
      group,
      from: transition.from,
      to: transition.to,
      reason: transition.reason,
      by: transition.by,
      ...(record?.nextHalfOpenAt === undefined
        ? {}
        : { nextHalfOpenAt: new Date(record.nextHalfOpenAt).toISOString() }),
    });
  }
}

/**
 * What an admitted attempt's end tells its breaker: every uncertain one counts; the half-open
 * attempt's applied (or definitely refused: the provider answered) closes it; a half-open attempt
 * that learnt nothing gives its slot back. Other ends say nothing about the provider.
 */
function breakerOutcome(execution: Execution, probe: boolean): BreakerOutcome | undefined {
  if (execution.outcome === 'uncertain') return 'uncertain';
  if (!probe) return undefined;
  if (execution.outcome === 'applied') return 'applied';
  if (execution.outcome === 'failed' && execution.definite) return 'applied';
  return 'released';
}

/** Where a gate reports what it saw: the activity's metric meter and logger. */
export interface Observer {
  meter: MetricMeter;
  log(message: string, attributes: Record<string, unknown>): void;
}
