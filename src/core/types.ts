/**
 * Identifies one logical action. Every retry of the same action must carry the
 * same key: that is what lets the store replay instead of re-applying.
 */
export type Key = string;

/**
 * A fencing token: issued by the store, one per grant, strictly increasing per
 * resource and never reset. Downstream writes present it so that a holder that
 * was paused past its lease cannot overwrite what the next holder wrote.
 */
export type Fence = number;

/**
 * What the host asserts about re-running an apply that failed.
 *
 * - `unknown` (the default): silence is treated as the weakest case, so a
 *   failed apply blocks the key until someone reconciles it.
 * - `unsafe`: the same handling, stated on purpose (useful in audits).
 * - `safe`: the downstream deduplicates by key, so a retry cannot apply twice.
 *   Declaring it wrongly is exactly how a duplicate charge happens.
 */
export type RetrySafety = 'unknown' | 'safe' | 'unsafe';

/**
 * The store's verdict for one acquire. Four answers, because the caller must
 * act differently on each: `granted` (the lease is yours: apply now), take the
 * stored result, back off and retry, or stop until a reconcile decides.
 * `applied` is kept for what happened after apply (an Execution's outcome).
 */
export type AcquireOutcome = 'granted' | 'replayed' | 'contended' | 'uncertain';

/** One side effect to be applied at most once. */
export interface Action {
  /** Idempotency key; non-empty. */
  key: Key;
  /** What the lease makes exclusive: at most one live holder per resource. */
  resource: string;
  /** The action's parameters. The key is bound to their digest, so reusing a key with other parameters is rejected. */
  payload?: Uint8Array;
  /** Defaults to `unknown`. */
  retrySafety?: RetrySafety;
}

/** One exclusive hold on a resource. Hand `fence` to every downstream write. */
export interface Lease {
  resource: string;
  fence: Fence;
  ttlMs: number;
  /** When the lease runs out, in milliseconds since the epoch, by the store's clock. */
  expiresAt: number;
}

/** What an applied action produced; stored and replayed byte for byte. */
export interface Result {
  payload: Uint8Array;
}

/** Where a key stands. `uncertain` blocks the key until a resolution. */
export type KeyState = 'free' | 'held' | 'applying' | 'done' | 'uncertain';

/** The answer to `Store.acquire`. */
export type Acquisition =
  | { outcome: 'granted'; lease: Lease }
  | { outcome: 'replayed'; result: Result }
  | { outcome: 'contended'; retryAfterMs: number }
  | { outcome: 'uncertain'; reason: string };

/** A key as the store holds it, for operators and tests. */
export interface KeyRecord {
  key: Key;
  resource: string;
  state: KeyState;
  /** The fence of the last grant to this key, 0 if never granted. */
  fence: Fence;
  retrySafety: RetrySafety;
  result?: Result;
  reason?: string;
  updatedAt: number;
}

/** One transition of a key, kept append-only. */
export interface KeyEvent {
  key: Key;
  from: KeyState;
  to: KeyState;
  fence: Fence;
  reason: string;
  /**
   * Who made the transition: for a verdict whoever it names (`Resolution.by`: a person,
   * `probe:<effect>`, `cli:<user>`), otherwise the store operation (`acquire`, `sweep`,
   * `takeover`, ...). Stored in the `actor` column.
   */
  by: string;
  /**
   * For a verdict: the Temporal identity that delivered it (`Resolution.identity`). Declared
   * by the sending client (the `temporal` CLI's `--identity` sets any), so a claim, not a proof,
   * unless the cluster authenticates its clients.
   */
  identity?: string;
  /**
   * The database role whose session recorded the event, as Postgres authenticated it (PgStore,
   * from migration 0014 on): unlike `by` and `identity`, chosen by nobody who calls the store.
   */
  dbUser?: string;
  at: number;
}

/** The keys waiting for a verdict, by the store's clock: what an operator is paged on. */
export interface UncertainBacklog {
  /** Uncertain keys now. */
  count: number;
  /** How long the oldest of them has been uncertain, 0 when none. */
  oldestAgeMs: number;
}

/** What `Store.sweep` concluded: keys whose holder's lease ran out with nobody to finish them. */
export interface SweepReport {
  /** Keys that were `applying` and became `uncertain`. */
  uncertain: Key[];
  /** Keys that were `held` and became `free`. */
  freed: Key[];
}
