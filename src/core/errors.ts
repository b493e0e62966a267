/**
 * Stable, machine-readable error codes. Match on `code` (or `instanceof`),
 * never on the message: messages may be reworded, codes are a contract.
 */
export type SideEffectErrorCode =
  | 'FENCE_STALE'
  | 'LEASE_LOST'
  | 'INVALID_ACTION'
  | 'NO_STORE'
  | 'OUTCOME_UNKNOWN'
  | 'NOT_UNCERTAIN'
  | 'STALE_VERDICT'
  | 'UNKNOWN_OUTCOME'
  | 'KEY_CONFLICT'
  | 'CONTENDED'
  | 'STORE_UNAVAILABLE'
  | 'MIGRATION_CONFLICT'
  | 'NOT_APPLIED';

/** Base of every error this library throws on purpose. */
export abstract class SideEffectError extends Error {
  abstract readonly code: SideEffectErrorCode;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * The presented fence is no longer the resource's newest: a late write from a
 * holder whose lease was taken over. Both the store (complete, renew, release,
 * markUncertain) and a FencedSink raise it, because it is the same fact.
 */
export class FenceStaleError extends SideEffectError {
  readonly code = 'FENCE_STALE';
  constructor(
    readonly resource: string,
    readonly fence: number,
    message = `fence ${fence} on resource "${resource}" is stale: another holder took over`,
  ) {
    super(message);
  }
}

/**
 * This caller no longer holds the resource. Unlike FenceStale (a write was
 * refused after the fact), it is raised before apply, while stopping is still
 * clean: nothing was applied, the whole action can be retried.
 */
export class LeaseLostError extends SideEffectError {
  readonly code = 'LEASE_LOST';
  constructor(
    readonly resource: string,
    readonly fence: number,
    options?: { cause?: unknown },
  ) {
    super(`lease on resource "${resource}" (fence ${fence}) was lost`, options);
  }
}

/** The action or an argument is malformed (empty key, zero TTL, oversized payload...). Nothing was written. */
export class InvalidActionError extends SideEffectError {
  readonly code = 'INVALID_ACTION';
  constructor(
    readonly field: string,
    reason: string,
  ) {
    super(`invalid ${field}: ${reason}`);
  }
}

/** No store was configured. Failing loudly here prevents "nothing happened" from reading as success. */
export class NoStoreError extends SideEffectError {
  readonly code = 'NO_STORE';
  constructor() {
    super('no store configured: cannot guard a side effect');
  }
}

/**
 * The last attempt may or may not have taken effect downstream. The key is
 * blocked: a blind retry is how a duplicate happens. Reconcile first.
 */
export class OutcomeUnknownError extends SideEffectError {
  readonly code = 'OUTCOME_UNKNOWN';
  constructor(
    readonly key: string,
    readonly resource: string,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(
      `outcome of "${key}" on "${resource}" is unknown (${reason}): reconcile before retrying`,
      options,
    );
  }
}

/**
 * A resolution was offered for a key that is not uncertain (never failed, or
 * already resolved as not applied). Distinct from a failure of the resolve
 * itself, because the caller's next step is different.
 */
export class NotUncertainError extends SideEffectError {
  readonly code = 'NOT_UNCERTAIN';
  constructor(
    readonly key: string,
    readonly state: string,
  ) {
    super(`key "${key}" is not uncertain (state: ${state})`);
  }
}

/**
 * A resolution named another episode of the key than the one the store has: it was made about an
 * earlier uncertain attempt (the key was since resolved, re-applied and became uncertain again),
 * or about none that exists. Refused, because a verdict judges one attempt: accepted, a "not
 * applied" from episode 1 would re-run an effect that episode 2 may already have applied.
 */
export class StaleVerdictError extends SideEffectError {
  readonly code = 'STALE_VERDICT';
  constructor(
    readonly key: string,
    /** The episode the verdict was about. */
    readonly fence: number,
    /** The key's episode now (the fence of its last grant). */
    readonly currentFence: number,
    /** The key's state now. */
    readonly state: string,
  ) {
    super(
      `verdict for "${key}" judges episode (fence) ${fence}, but the key is at fence ${currentFence} (${state}): not recorded`,
    );
  }
}

/** The store answered with a verdict this version does not know. Surfaced so nobody guesses a default. */
export class UnknownOutcomeError extends SideEffectError {
  readonly code = 'UNKNOWN_OUTCOME';
  constructor(readonly outcome: unknown) {
    super(`store returned an unknown outcome: ${String(outcome)}`);
  }
}

/**
 * The key is already bound to another resource or other parameters. Reusing a
 * key for a different action would replay the wrong result.
 */
export class KeyConflictError extends SideEffectError {
  readonly code = 'KEY_CONFLICT';
  constructor(
    readonly key: string,
    readonly field: 'resource' | 'payload',
  ) {
    super(`key "${key}" is already bound to a different ${field}`);
  }
}

/**
 * Another holder has the resource. Retryable: the action has not run, and the
 * same key will be granted once the lease ends. Treating it as final loses the action.
 */
export class ContendedError extends SideEffectError {
  readonly code = 'CONTENDED';
  constructor(
    readonly key: string,
    readonly resource: string,
    readonly retryAfterMs: number,
    options?: { cause?: unknown },
  ) {
    super(
      `resource "${resource}" is held by another caller; retry "${key}" in ${retryAfterMs} ms`,
      options,
    );
  }
}

/**
 * The store could not be reached or the operation's fate is unknown to us
 * (connection killed, database down). Never reported as an outcome.
 */
export class StoreUnavailableError extends SideEffectError {
  readonly code = 'STORE_UNAVAILABLE';
  constructor(operation: string, cause: unknown) {
    super(`store ${operation} failed: ${cause instanceof Error ? cause.message : String(cause)}`, {
      cause,
    });
  }
}

/**
 * The schema was migrated by a newer version of this library, or an applied
 * migration file was edited since. Refused, because running functions this
 * code does not know is how a state machine silently changes under a worker.
 */
export class MigrationConflictError extends SideEffectError {
  readonly code = 'MIGRATION_CONFLICT';
}

/**
 * Thrown by an apply when the downstream definitely refused and nothing took
 * effect (card declined, validation error). The Runner releases the key instead
 * of marking it uncertain, so nobody is paged to reconcile a refusal; in
 * Temporal it fails the workflow's call with `type` (default
 * `SideEffectNotApplied`) and `details`, non-retryable. Throw it only when
 * sure: "unknown" stays the safe default for every other error.
 */
export class NotAppliedError extends SideEffectError {
  readonly code = 'NOT_APPLIED';
  /** The failure type the workflow sees, e.g. `CardDeclined`. */
  readonly type: string | undefined;
  readonly details: unknown[];
  constructor(
    message: string,
    options: { type?: string; details?: unknown[]; cause?: unknown } = {},
  ) {
    super(message, options);
    this.type = options.type;
    this.details = options.details ?? [];
  }
}
