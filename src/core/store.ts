import type { Execution } from './runner.js';
import type {
  Acquisition,
  Action,
  Fence,
  Key,
  KeyEvent,
  KeyRecord,
  KeyState,
  Lease,
  Result,
  SweepReport,
  UncertainBacklog,
} from './types.js';
import type {
  PendingVerdict,
  PendingVerdictOutcome,
  PendingVerdictPage,
  Resolution,
  ResolveOutcome,
  VerdictJudgement,
  Withdrawal,
} from './verdict.js';

/** Which keys `Store.list` returns, and in what order. */
export interface ListFilter {
  state?: KeyState;
  limit?: number;
  oldest?: boolean;
}

/**
 * The storage boundary of the gate. Every method is ONE atomic operation in
 * the store and judges lease expiry by the store's own clock: a
 * read-decide-write from the process would let two workers both conclude
 * "not done yet, resource free" and apply twice.
 */
export interface Store {
  /**
   * Decides, in this order: key done -> `replayed`; key uncertain ->
   * `uncertain`; key applying with its lease gone -> `uncertain` (or a new
   * grant if declared safe); resource held by a live lease -> `contended`;
   * otherwise a grant with the resource's next fence. A grant that takes over
   * an expired holder concludes that holder's key in the same operation.
   * With `applying`, the grant moves the key straight to `applying`
   * (no prepare phase, one round trip saved).
   */
  acquire(action: Action, ttlMs: number, options?: { applying?: boolean }): Promise<Acquisition>;

  /**
   * Extends the lease and proves it is still ours (fence current, holder this
   * key; an expired but untaken lease may be renewed). A renew that only
   * extended time would extend someone else's lease. With `applying`, also
   * moves the key to `applying`. Throws FenceStaleError otherwise.
   */
  renew(
    action: Action,
    lease: Lease,
    ttlMs: number,
    options?: { applying?: boolean },
  ): Promise<Lease>;

  /**
   * Records the result and frees the resource, only while this lease's fence
   * is current and held by this key. A repeat with the same fence returns the
   * first stored result. Throws FenceStaleError otherwise, so a late holder
   * never overwrites a newer truth.
   */
  complete(action: Action, lease: Lease, result: Result): Promise<Result>;

  /**
   * Blocks the key until a resolution and ends this hold on the resource.
   * Same fence rule as complete, idempotent. A stale holder must not mark a
   * newer holder's finished work as doubtful.
   */
  markUncertain(action: Action, lease: Lease, reason: string): Promise<void>;

  /**
   * Frees the resource if this lease still holds it; a held or applying key
   * with this fence goes back to `free`, never to `done`. Releasing a lease
   * that was already released or completed is a no-op; a lease someone else
   * took over gets FenceStaleError, so a late release never frees a newer holder.
   */
  release(action: Action, lease: Lease): Promise<void>;

  /**
   * Applies a reconcile verdict to an uncertain key, without a fence check
   * (the holder may be long dead). First resolution wins: on a done key it
   * returns `replayed` and the stored result; on any other state it throws
   * NotUncertainError.
   */
  resolveUncertain(key: Key, resolution: Resolution): Promise<ResolveOutcome>;

  /**
   * Concludes keys whose lease ran out with nobody left to finish them:
   * `applying` -> `uncertain` (unless declared safe: then `free`), `held` ->
   * `free`. Run it periodically so no key stays stuck when nobody retries it.
   */
  sweep(): Promise<SweepReport>;

  /**
   * How many keys wait for a verdict and how long the oldest has waited, in
   * one cheap read. Nothing else tells anyone that a payment is stuck.
   */
  uncertainBacklog(): Promise<UncertainBacklog>;

  /** The key's current record, or undefined if the store never saw it. */
  inspect(key: Key): Promise<KeyRecord | undefined>;

  /**
   * Keys, newest change first (`oldest: true` for oldest first, so a sweeper
   * working through a backlog in pages reaches every key), optionally in one state.
   */
  list(filter?: ListFilter): Promise<KeyRecord[]>;

  /** The key's transitions, oldest first. */
  events(key: Key): Promise<KeyEvent[]>;

  /**
   * Deletes done keys (and their events) last changed more than `olderThanMs`
   * ago. Never touches uncertain keys or resource fences: a fence that went
   * back to zero would let a stale holder's write through again. An age below
   * `limits.minPurgeAgeMs` is refused (PurgeBelowFloorError) unless `force`:
   * a done key purged while a caller may still retry it runs its effect again.
   */
  purge(options: { olderThanMs: number; force?: boolean }): Promise<number>;
}

/**
 * How the worker's sweepers share one store, beside the {@link Store} contract and not part of
 * it: a custom store leaves these out (every worker then sweeps, and every uncertain key is
 * started again per sweep; harmless, as the start is use-existing), both bundled stores have
 * them. Internal: their shape follows the sweeper's and may change in any release.
 * @internal
 */
export interface SweepCoordination {
  /**
   * Optional, for one sweeper per store: claims up to `limit` uncertain keys, oldest first,
   * whose current attempt has no ReconcileWorkflow started yet (or had one started more than
   * `restartAfterMs` ago, in case it was terminated), and records the start. Atomic: two
   * claimers never get the same key, so every worker may sweep and still each key gets one
   * start per uncertain attempt, not one per tick.
   */
  claimReconciles?(options: { limit: number; restartAfterMs: number }): Promise<KeyRecord[]>;

  /**
   * Optional: makes `owner` the one sweeper of this store if nobody else is (true), keeps it
   * while it is (true again), or answers false while another owner leads. A leader that dies
   * loses it on its own (a Postgres session lock ends with the session). `onLost` is called
   * once if the store sees the leadership end without `resignSweep` (its session died), so the
   * old leader stops reporting the backlog at once instead of at its next tick.
   */
  leadSweep?(owner: object, onLost?: () => void): Promise<boolean>;

  /** Optional: gives up the leadership `owner` holds, so another sweeper takes over at once. */
  resignSweep?(owner: object): Promise<void>;
}

/**
 * Verdicts held for a worker's check, beside the {@link Store} contract: whoever records a
 * verdict without a worker (the CLI when Temporal does not answer in time) holds it here instead
 * of deciding the key, so the effect's `result` check still runs before any caller sees it. Both
 * bundled stores implement it; a store without it has verdicts recorded straight away, unchecked.
 */
export interface PendingVerdictStore {
  /**
   * Holds a verdict on an uncertain key for a worker's check, pinned to the attempt it judges
   * (its `fence`, else the key's current one) and recorded as an event. Refused as
   * `resolveUncertain` refuses: StaleVerdictError for another attempt, NotUncertainError unless
   * uncertain; on a done key returns `replayed` with the result that stands. PendingVerdictsFullError
   * when the attempt already has `MAX_PENDING_VERDICTS` (100) pending.
   */
  addPendingVerdict(key: Key, resolution: Resolution): Promise<PendingVerdictOutcome>;

  /**
   * The key's pending verdicts, oldest first, whatever each became, a page at a time (at most
   * 100 by default, 1,000 at most). One still `pending` whose key was decided or moved on to
   * another attempt reads `late`.
   */
  pendingVerdicts(key: Key, page?: PendingVerdictPage): Promise<PendingVerdict[]>;

  /** How many verdicts are still pending on each key's current attempt (keys with none are absent). */
  pendingVerdictCounts(keys: Key[]): Promise<Map<Key, number>>;

  /**
   * Withdraws a verdict still pending on `key`, atomically: `withdrawn` with who and why, and an
   * event on the key (`withdrawn: true`). One judged or withdrawn before is returned as it stands
   * (`withdrawn: false`); an id that is not the key's answers undefined.
   */
  withdrawPendingVerdict(
    key: Key,
    id: number,
    withdrawal: Withdrawal,
  ): Promise<{ withdrawn: boolean; verdict: PendingVerdict } | undefined>;

  /** Up to `limit` uncertain keys with a pending verdict for their current attempt, oldest verdict first. */
  pendingVerdictKeys(limit: number): Promise<Key[]>;

  /**
   * Judges a pending verdict in one atomic step: accepted, it is applied as `resolveUncertain`
   * applies a verdict (first resolution wins, same attempt only; else it becomes `late`);
   * refused, it is marked so with why, and an event on the still uncertain key says so. A
   * verdict judged before is returned as it stands; an unknown id answers undefined.
   */
  judgeVerdict(id: number, judgement: VerdictJudgement): Promise<PendingVerdict | undefined>;
}

/** Whether `store` holds verdicts for a worker's check. */
export function keepsPendingVerdicts<S extends object>(store: S): store is S & PendingVerdictStore {
  return typeof (store as Partial<PendingVerdictStore>).addPendingVerdict === 'function';
}

/**
 * The downstream side of the fence. The store issues fences; only the
 * downstream can refuse a late write, and only if the comparison and the
 * write happen in one atomic step.
 */
export interface FencedSink<Tx> {
  /**
   * Runs `write` only if `fence` is not below the highest fence this sink has
   * seen for `resource` (equal is legal: one holder may write several times),
   * raising that mark and writing atomically. A lower fence throws
   * FenceStaleError and nothing is written.
   */
  writeFenced<T>(resource: string, fence: Fence, write: (tx: Tx) => Promise<T>): Promise<T>;

  /**
   * Raises the mark for `resource` to at least `fence` (never lowers it) and
   * runs `read` in the same transaction. What a probe reads this way stays
   * true: a holder that lost its lease may only be paused, and a plain
   * "not applied" read could be followed by its late write; after this, that
   * write is refused. Never refuses: a higher mark already fences it out.
   */
  readFenced<T>(resource: string, fence: Fence, read: (tx: Tx) => Promise<T>): Promise<T>;
}

/** What a transactional effect gets: the store's own transaction, the key and the fence it holds. */
export interface TransactionContext<Tx> {
  /** The store's open transaction: run every statement of the effect on it; never commit or roll back yourself. */
  tx: Tx;
  key: Key;
  /** The fence of this grant (useful as a version column downstream). */
  fence: Fence;
  /** Fires when the caller gives up (for example Temporal cancelling the activity); throw to roll back. */
  signal: AbortSignal;
}

/**
 * The isolation level a transactional effect's statements run at. The store's own decisions hold
 * at each (a snapshot that missed a concurrent commit ends in a serialization failure, which the
 * store answers by running the whole attempt again); the work's own checks get what the level
 * promises, and at the stricter levels may be run more than once before one commits.
 */
export type TransactionIsolation = 'read committed' | 'repeatable read' | 'serializable';

/** Every TransactionIsolation, for checking a level given at run time (a JavaScript caller, a config file). */
export const TRANSACTION_ISOLATIONS: readonly TransactionIsolation[] = [
  'read committed',
  'repeatable read',
  'serializable',
];

/** How a transactional effect runs. */
export interface TransactionOptions {
  /**
   * Fires when the caller gives up; the work sees it as `context.signal`.
   * @default none: the work is never told to stop
   */
  signal?: AbortSignal;
  /**
   * The isolation level of the whole transaction (grant, work, record). Stricter levels suit work
   * whose own reads must not change under it (a balance check); serialization failures are
   * retried, a few times, from the start.
   * @default 'read committed'
   */
  isolation?: TransactionIsolation;
}

/**
 * A store that can run an effect's own statements inside the transaction that
 * acquires and completes its key: a crash or a lost connection rolls all of it
 * back, so the outcome is never uncertain (exactly once) and it costs one commit.
 */
export interface TransactionalStore<Tx> extends Store {
  /**
   * Acquire (straight into applying), `work(tx)` and complete, in ONE transaction
   * on one connection. `work` throwing rolls everything back: `failed`, nothing
   * applied. Replayed, contended and uncertain keys are answered as `acquire`
   * answers them, without calling `work`. A commit whose answer was lost throws
   * StoreUnavailableError; the store knows which way it went, so a retry
   * replays or applies, never duplicates. A key used both here and through
   * `acquire` is a KeyConflictError (`transactional`).
   */
  executeInTransaction(
    action: Action,
    ttlMs: number,
    work: (context: TransactionContext<Tx>) => Promise<Result>,
    options?: TransactionOptions,
  ): Promise<Execution>;
}

/** Whether `store` can run transactional effects. */
export function isTransactionalStore<Tx = unknown>(
  store: Store | undefined,
): store is TransactionalStore<Tx> {
  return (
    typeof store === 'object' &&
    store !== null &&
    typeof (store as Partial<TransactionalStore<Tx>>).executeInTransaction === 'function'
  );
}
