import { InvalidActionError } from './errors.js';
import type { Fence, Key } from './types.js';
import { checkText } from './validate.js';

/**
 * Where a provider group's breaker stands. `open`: no new attempt of the group starts;
 * `half-open`: exactly one new attempt (the probe) goes through, the others wait for its outcome.
 */
export type BreakerState = 'closed' | 'open' | 'half-open';

/**
 * When a group's breaker opens and for how long, declared per effect (or as the plugin's
 * default). Without it, a provider that takes requests and then times out turns every attempt in
 * flight and every new one uncertain, each waiting for a person.
 */
export interface BreakerPolicy {
  /** The provider group: effects naming the same group share one breaker. */
  group: string;
  /** Uncertain outcomes within `windowMs` that open the breaker. */
  threshold: number;
  /** How far back uncertain outcomes count (never before the breaker last closed). */
  windowMs: number;
  /** How long it stays open before one attempt may go through (half-open). */
  coolDownMs: number;
  /** Each uncertain probe doubles the cool-down, up to this. */
  maxCoolDownMs: number;
}

/** A group's breaker as the store holds it, for people (`sideeffect breakers`) and the gate. */
export interface BreakerRecord {
  group: string;
  state: BreakerState;
  /** When it entered this state, by the store's clock (epoch ms). */
  since: number;
  /** Why it is in this state (the threshold crossed, the probe's outcome, a person's reason). */
  reason: string;
  /** Who moved it there: `breaker` for the thresholds, otherwise the person named. */
  by: string;
  /** The client identity that moved it (the CLI's), beside the declared `by`. */
  identity?: string;
  /** A person moved it: a person's open holds until a person closes it. */
  manual: boolean;
  /** Uncertain outcomes counted now: within the last window, since the breaker last closed. */
  uncertainInWindow: number;
  /** Open: when one attempt may go through; half-open: when the probe's slot runs out. */
  nextHalfOpenAt?: number;
  /** The cool-down in force (grows while probes keep ending uncertain). */
  coolDownMs: number;
  /** Half-open: the key of the one attempt let through. */
  probeKey?: Key;
}

/** One transition of a breaker, kept append-only. */
export interface BreakerTransition {
  group: string;
  from: BreakerState;
  to: BreakerState;
  reason: string;
  by: string;
  identity?: string;
  at: number;
}

/**
 * Whether a new attempt of the group may start. `probe`: this attempt is the half-open one; its
 * outcome closes or re-opens the breaker. Refused: the record says until when and why.
 */
export type BreakerAdmission =
  | { admitted: true; probe: boolean; record?: BreakerRecord; transition?: BreakerTransition }
  | {
      admitted: false;
      record: BreakerRecord;
      /** When to ask again, by the store's clock (epoch ms). */
      retryAt: number;
      /** `retryAt` less the store's now: what a worker whose clock differs waits. */
      retryAfterMs: number;
      transition?: BreakerTransition;
    };

/**
 * How an admitted attempt ended, as far as its breaker cares: `uncertain` counts (and re-opens
 * after a probe), `applied` closes after a probe (so does a definite refusal: the provider
 * answered), `released` gives a probe's slot back (nothing reached the provider, or nothing is
 * known).
 */
export type BreakerOutcome = 'uncertain' | 'applied' | 'released';

/** What a breaker call answers: the record now, and the transition it made, if any. */
export interface BreakerAnswer {
  record: BreakerRecord;
  transition?: BreakerTransition;
}

/**
 * A person's move: open (holds until a person closes it) or close (the count starts again).
 * `by` and `identity` are recorded as a verdict's are.
 */
export interface BreakerCommand {
  state: 'open' | 'closed';
  reason: string;
  by: string;
  identity?: string;
}

/**
 * A store that keeps breakers, beside the `Store` contract: optional, both bundled stores
 * have it. Each call is ONE atomic operation by the store's clock, so every worker of a store sees
 * one breaker per group and exactly one half-open attempt goes through across them.
 */
export interface BreakerStore {
  /**
   * Asked once a new attempt holds its lease, before it touches the provider. Closed: admitted
   * (nothing written). Open past its cool-down, or half-open with the probe's slot run out and
   * the probe no longer holding a live lease: this attempt becomes the probe, so at most one
   * attempt of the group is at the provider while half-open. Otherwise refused until `retryAt`.
   */
  admitAttempt(policy: BreakerPolicy, key: Key): Promise<BreakerAdmission>;
  /**
   * Records how an admitted attempt ended. Idempotent per attempt (key and fence): a repeat
   * counts once.
   */
  recordOutcome(
    policy: BreakerPolicy,
    attempt: { key: Key; fence: Fence; outcome: BreakerOutcome },
  ): Promise<BreakerAnswer>;
  /** A person's open or close; wins over the thresholds until the next transition. */
  setBreaker(group: string, command: BreakerCommand): Promise<BreakerAnswer>;
  /** The group's breaker, or undefined if it never had an uncertain outcome nor a person's move. A read: it moves nothing. */
  breaker(group: string): Promise<BreakerRecord | undefined>;
  /** Every group's breaker, by group name. */
  breakers(): Promise<BreakerRecord[]>;
  /** The group's transitions, oldest first. */
  breakerEvents(group: string): Promise<BreakerTransition[]>;
}

/** Whether `store` keeps breakers. */
export function keepsBreakers<S extends object>(store: S): store is S & BreakerStore {
  return typeof (store as Partial<BreakerStore>).admitAttempt === 'function';
}

/** The defaults a payments team would accept: 5 uncertain in 60 s, 30 s cool-down, at most 10 min. */
export const defaultBreakerPolicy: Omit<BreakerPolicy, 'group'> = {
  threshold: 5,
  windowMs: 60_000,
  coolDownMs: 30_000,
  maxCoolDownMs: 600_000,
};

/** The longest group name: a breaker row's key. */
const MAX_GROUP_BYTES = 256;

/** Validates a policy (from code or a config file) before the store sees it. */
export function checkBreakerPolicy(policy: BreakerPolicy): BreakerPolicy {
  const group = checkBreakerGroup(policy.group);
  const whole = (field: keyof BreakerPolicy, min: number): number => {
    const value = policy[field];
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min)
      throw new InvalidActionError(
        `breaker.${field}`,
        `must be an integer of at least ${min}, got ${String(value)}`,
      );
    return value;
  };
  const checked = {
    group,
    threshold: whole('threshold', 1),
    windowMs: whole('windowMs', 1),
    coolDownMs: whole('coolDownMs', 1),
    maxCoolDownMs: whole('maxCoolDownMs', 1),
  };
  if (checked.maxCoolDownMs < checked.coolDownMs)
    throw new InvalidActionError('breaker.maxCoolDownMs', 'must not be below coolDownMs');
  return checked;
}

export function checkBreakerGroup(group: unknown, field = 'breaker group'): string {
  return checkText(field, group, MAX_GROUP_BYTES);
}

/** An attempt's outcome as a store records it: a key, the fence of its grant, one of the outcomes. */
export function checkBreakerAttempt(
  attempt: { key: Key; fence: Fence; outcome: BreakerOutcome },
  maxKeyBytes: number,
): { key: Key; fence: Fence; outcome: BreakerOutcome } {
  const key = checkText('key', attempt.key, maxKeyBytes);
  if (!Number.isSafeInteger(attempt.fence) || attempt.fence < 1)
    throw new InvalidActionError(
      'fence',
      `must be a positive integer, got ${String(attempt.fence)}`,
    );
  if (!['uncertain', 'applied', 'released'].includes(attempt.outcome))
    throw new InvalidActionError(
      'outcome',
      `must be uncertain, applied or released, got ${String(attempt.outcome)}`,
    );
  return { key, fence: attempt.fence, outcome: attempt.outcome };
}

/** A person's command, checked: a reason and a name that say something. */
export function checkBreakerCommand(command: BreakerCommand): BreakerCommand {
  if (command.state !== 'open' && command.state !== 'closed')
    throw new InvalidActionError('state', `must be open or closed, got ${String(command.state)}`);
  const reason = checkText('reason', command.reason, 4096);
  if (reason.trim().length === 0) throw new InvalidActionError('reason', 'must not be blank');
  const by = checkText('by', command.by, 256);
  if (by.trim().length === 0) throw new InvalidActionError('by', 'must not be blank');
  const identity =
    command.identity === undefined ? undefined : checkText('identity', command.identity, 256);
  return { state: command.state, reason, by, ...(identity === undefined ? {} : { identity }) };
}

/**
 * The breaker state machine over one group's row, in memory (the MemoryStore's, and the
 * reference the Postgres functions of migrations 0021 and 0024 follow): every call decides and writes at
 * once, by `now`.
 */
export class BreakerMachine {
  readonly #rows = new Map<string, BreakerRow>();
  readonly #events: BreakerTransition[] = [];

  /**
   * `probeHeldUntil(key)` is when the live lease of `key` runs out, or undefined when it holds
   * none: a slow probe keeps its slot past the cool-down for as long as it may still reach the
   * provider, so a second attempt never joins it there.
   */
  admit(
    policy: BreakerPolicy,
    key: Key,
    now: number,
    probeHeldUntil: (probe: Key) => number | undefined,
  ): BreakerAdmission {
    const row = this.#rows.get(policy.group);
    if (row === undefined || row.state === 'closed') return { admitted: true, probe: false };
    if (row.state === 'open' && !row.manual && row.until! <= now) {
      const transition = this.#move(
        row,
        'half-open',
        'cool-down over: one attempt goes through',
        'breaker',
        undefined,
        now,
      );
      row.probeKey = key;
      row.until = now + row.coolDownMs;
      return { admitted: true, probe: true, record: this.#record(row, now), transition };
    }
    const probeHeld =
      row.state === 'half-open' && row.probeKey !== undefined && row.probeKey !== key
        ? probeHeldUntil(row.probeKey)
        : undefined;
    if (
      row.state === 'half-open' &&
      (row.probeKey === key || (row.until! <= now && probeHeld === undefined))
    ) {
      row.probeKey = key;
      row.until = now + row.coolDownMs;
      return { admitted: true, probe: true, record: this.#record(row, now) };
    }
    const retryAt = Math.max(row.until ?? now + policy.coolDownMs, probeHeld ?? 0);
    return {
      admitted: false,
      record: this.#record(row, now),
      retryAt,
      retryAfterMs: retryAt - now,
    };
  }

  record(
    policy: BreakerPolicy,
    attempt: { key: Key; fence: Fence; outcome: BreakerOutcome },
    now: number,
  ): BreakerAnswer {
    const row = this.#row(policy.group, now);
    row.windowMs = policy.windowMs;
    const probe = row.state === 'half-open' && row.probeKey === attempt.key;
    let transition: BreakerTransition | undefined;
    if (probe) {
      if (attempt.outcome === 'applied') {
        transition = this.#move(
          row,
          'closed',
          'the half-open attempt applied',
          'breaker',
          undefined,
          now,
        );
      } else if (attempt.outcome === 'uncertain') {
        row.coolDownMs = Math.min(row.coolDownMs * 2, policy.maxCoolDownMs);
        transition = this.#move(
          row,
          'open',
          `the half-open attempt ${attempt.key} ended uncertain`,
          'breaker',
          undefined,
          now,
        );
        row.until = now + row.coolDownMs;
      } else {
        // Nothing learnt: the slot is free again for the next attempt.
        row.until = now;
      }
    } else if (attempt.outcome === 'uncertain' && row.state === 'closed') {
      row.outcomes.set(`${attempt.key}\0${attempt.fence}`, now);
      for (const [id, at] of row.outcomes) if (at <= now - policy.windowMs) row.outcomes.delete(id);
      const count = this.#count(row, now);
      if (count >= policy.threshold) {
        transition = this.#move(
          row,
          'open',
          `${count} uncertain outcomes within ${policy.windowMs} ms (threshold ${policy.threshold}), the last ${attempt.key}`,
          'breaker',
          undefined,
          now,
        );
        row.coolDownMs = policy.coolDownMs;
        row.until = now + row.coolDownMs;
      }
    }
    return { record: this.#record(row, now), ...(transition ? { transition } : {}) };
  }

  set(group: string, command: BreakerCommand, now: number): BreakerAnswer {
    const row = this.#row(group, now);
    const transition = this.#move(
      row,
      command.state,
      command.reason,
      command.by,
      command.identity,
      now,
    );
    row.manual = true;
    return { record: this.#record(row, now), transition };
  }

  get(group: string, now: number): BreakerRecord | undefined {
    const row = this.#rows.get(group);
    return row && this.#record(row, now);
  }

  list(now: number): BreakerRecord[] {
    return [...this.#rows.values()]
      .sort((a, b) => (a.group < b.group ? -1 : a.group > b.group ? 1 : 0))
      .map((row) => this.#record(row, now));
  }

  events(group: string): BreakerTransition[] {
    return this.#events.filter((event) => event.group === group).map((event) => ({ ...event }));
  }

  #row(group: string, now: number): BreakerRow {
    let row = this.#rows.get(group);
    if (row === undefined) {
      row = {
        group,
        state: 'closed',
        since: now,
        reason: 'no uncertain outcomes yet',
        by: 'breaker',
        manual: false,
        coolDownMs: 0,
        windowMs: defaultBreakerPolicy.windowMs,
        outcomes: new Map(),
      };
      this.#rows.set(group, row);
    }
    return row;
  }

  #move(
    row: BreakerRow,
    to: BreakerState,
    reason: string,
    by: string,
    identity: string | undefined,
    now: number,
  ): BreakerTransition {
    const transition: BreakerTransition = {
      group: row.group,
      from: row.state,
      to,
      reason,
      by,
      ...(identity === undefined ? {} : { identity }),
      at: now,
    };
    this.#events.push(transition);
    row.state = to;
    row.since = now;
    row.reason = reason;
    row.by = by;
    row.identity = identity;
    row.manual = false;
    row.probeKey = undefined;
    row.until = undefined;
    // A close starts the count again: outcomes from before it no longer count.
    if (to === 'closed') row.outcomes.clear();
    return { ...transition };
  }

  #count(row: BreakerRow, now: number): number {
    let count = 0;
    for (const at of row.outcomes.values()) if (at > now - row.windowMs) count += 1;
    return count;
  }

  #record(row: BreakerRow, now: number): BreakerRecord {
    return {
      group: row.group,
      state: row.state,
      since: row.since,
      reason: row.reason,
      by: row.by,
      ...(row.identity === undefined ? {} : { identity: row.identity }),
      manual: row.manual,
      uncertainInWindow: this.#count(row, now),
      ...(row.until === undefined ? {} : { nextHalfOpenAt: row.until }),
      coolDownMs: row.coolDownMs,
      ...(row.probeKey === undefined ? {} : { probeKey: row.probeKey }),
    };
  }
}

interface BreakerRow {
  group: string;
  state: BreakerState;
  since: number;
  reason: string;
  by: string;
  identity?: string | undefined;
  manual: boolean;
  until?: number | undefined;
  coolDownMs: number;
  windowMs: number;
  probeKey?: Key | undefined;
  /** Uncertain outcomes since the last close, per attempt (`key\0fence`), with when. */
  outcomes: Map<string, number>;
}
