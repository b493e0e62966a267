/**
 * The `type` of every Temporal `ApplicationFailure` this library raises. Retry
 * policies (`nonRetryableErrorTypes`), workflow `catch` blocks and the UI match
 * on these strings, so they are a contract like the core error `code`s: renaming
 * one silently turns a handled failure into an unhandled one.
 *
 * Workflow-safe (no imports): usable from workflows, activities and clients.
 */
export const SideEffectFailureType = {
  /** Another holder has the resource; retryable, with `nextRetryDelay` = time left on its lease. */
  Contended: 'SideEffectContended',
  /** It may have taken effect; non-retryable; details `[{ key, resource, reason }]`. Reconcile first. */
  OutcomeUncertain: 'SideEffectOutcomeUncertain',
  /** The action is malformed (empty key or resource, input not JSON, oversized payload); non-retryable. */
  InvalidAction: 'SideEffectInvalidAction',
  /** A verdict judged another attempt (fence) of the key than the store's; non-retryable; details `[{ key, fence, currentFence, state }]`. */
  StaleVerdict: 'SideEffectStaleVerdict',
  /** The key is already bound to another resource or input; non-retryable (a retry would replay the wrong result). */
  KeyConflict: 'SideEffectKeyConflict',
  /** apply returned something that is not JSON-serialisable; non-retryable, the key is left for reconcile. */
  InvalidResult: 'SideEffectInvalidResult',
  /**
   * The effect's breaker group is open (its provider's outcomes turned uncertain): nothing was
   * attempted, the key is free; retryable, with `nextRetryDelay` = time to the next half-open.
   * Details `[{ key, group, state, reason, by, since, retryAt, retryAfterMs }]`. The workflow's
   * guarded call waits it out, unless it set `maxPause`: past that, the call fails with this type,
   * non-retryable, details `[{ key, group, pausedMs, turns }]`, for the workflow to handle.
   */
  Paused: 'SideEffectPaused',
  /** The effect's in-flight bound in this worker is full; retryable, nothing was attempted. */
  TooManyInFlight: 'SideEffectTooManyInFlight',
  /** The store's schema lacks its tables or functions (not migrated, or another schema); non-retryable, the message names the fix. */
  StoreMisconfigured: 'SideEffectStoreMisconfigured',
  /** The store could not be reached; retryable. */
  StoreUnavailable: 'SideEffectStoreUnavailable',
  /** apply threw a `NotAppliedError` without its own type: the downstream refused, the key is free; non-retryable. */
  NotApplied: 'SideEffectNotApplied',
  /**
   * A transactional effect's work ended or misused the store's transaction (COMMIT, ROLLBACK, a
   * FencedSink write, session state through a pooler); non-retryable: the same work would do it
   * again, and each attempt could leave what it wrote outside the transaction behind.
   */
  TransactionMisuse: 'SideEffectTransactionMisuse',
  /** The activity's timeouts cannot work with the lease TTL (heartbeat timeout not above ttl/3); non-retryable. */
  Misconfigured: 'SideEffectMisconfigured',
} as const;

/** One of the {@link SideEffectFailureType} strings. */
export type SideEffectFailureType =
  (typeof SideEffectFailureType)[keyof typeof SideEffectFailureType];
