/**
 * Stable, machine-readable error codes. Match on `code` (or `instanceof`),
 * never on the message: messages may be reworded, codes are a contract.
 */
export type SideEffectErrorCode =
  | 'FENCE_STALE'
  | 'LEASE_LOST'
  | 'INVALID_ACTION'
  | 'NO_STORE'
  | 'OUTCOME_UNCERTAIN'
  | 'NOT_UNCERTAIN'
  | 'STALE_VERDICT'
  | 'PENDING_VERDICTS_FULL'
  | 'UNEXPECTED_STORE_ANSWER'
  | 'KEY_CONFLICT'
  | 'CONTENDED'
  | 'STORE_UNAVAILABLE'
  | 'STORE_MISCONFIGURED'
  | 'MIGRATION_CONFLICT'
  | 'ACTIVITY_NAME_CLASH'
  | 'SEARCH_ATTRIBUTES_MISSING'
  | 'NOT_TRANSACTIONAL'
  | 'NOT_APPLIED'
  | 'INVALID_SCHEMA'
  | 'PURGE_BELOW_FLOOR'
  | 'TRANSACTION_ENDED'
  | 'TRANSACTION_MISUSE'
  | 'UNSUPPORTED_SDK'
  | 'BREAKER_OPEN';

/**
 * Codes of 0.1 that a rename replaced, still matched by {@link hasCode}:
 * `OUTCOME_UNKNOWN` (now `OUTCOME_UNCERTAIN`) and `UNKNOWN_OUTCOME` (now
 * `UNEXPECTED_STORE_ANSWER`), two errors whose codes differed only in word order.
 * @deprecated since 0.2.0, removed in 0.3.0: match `OUTCOME_UNCERTAIN` and
 * `UNEXPECTED_STORE_ANSWER`; `hasCode` stops matching these then.
 */
export type FormerErrorCode = 'OUTCOME_UNKNOWN' | 'UNKNOWN_OUTCOME';

const FORMER_CODES: Record<FormerErrorCode, SideEffectErrorCode> = {
  OUTCOME_UNKNOWN: 'OUTCOME_UNCERTAIN',
  UNKNOWN_OUTCOME: 'UNEXPECTED_STORE_ANSWER',
};

/**
 * Whether `error` is this library's error with `code`, a former name of its code included: match
 * with it instead of `error.code === ...`, so a code renamed before 1.0 keeps matching for the
 * window its CHANGELOG entry gives.
 */
export function hasCode(error: unknown, code: SideEffectErrorCode | FormerErrorCode): boolean {
  if (!(error instanceof SideEffectError)) return false;
  return error.code === code || error.code === FORMER_CODES[code as FormerErrorCode];
}

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

/**
 * A schema name the store cannot use as configured, refused when the store, sink or migrate is
 * set up rather than at the first statement. `rule` says which rule it breaks: `empty`, `nul`
 * (Postgres cannot store the byte), `too-long` (over 63 bytes: Postgres would silently truncate
 * it, and two configured schemas would share one set of tables) or `reserved` (`pg_` names are
 * the system's: Postgres refuses to create them).
 */
export class InvalidSchemaError extends SideEffectError {
  readonly code = 'INVALID_SCHEMA';
  constructor(
    readonly schema: unknown,
    readonly rule: 'empty' | 'nul' | 'too-long' | 'reserved',
    reason: string,
  ) {
    super(`invalid schema name (${rule}): ${reason}`);
  }
}

/**
 * A purge asked to delete done keys younger than the store's floor (`limits.minPurgeAgeMs`)
 * without `force`. Refused, nothing deleted: a done key purged while a caller may still retry it
 * is a fresh key to the store, and the effect runs again.
 */
export class PurgeBelowFloorError extends SideEffectError {
  readonly code = 'PURGE_BELOW_FLOOR';
  constructor(
    readonly olderThanMs: number,
    readonly floorMs: number,
    /**
     * `'owner'`: forced, and refused by the schema itself, which lets only its owner's role purge
     * below its floor (a worker's role could otherwise delete what a replay still needs).
     */
    readonly refusedBy?: 'owner',
  ) {
    super(
      refusedBy === 'owner'
        ? `refusing to purge done keys younger than ${floorMs} ms, asked ${olderThanMs} ms with force: below that the store's schema lets only its owner's role purge (docs/database-roles.md)`
        : `refusing to purge done keys younger than ${floorMs} ms (limits.minPurgeAgeMs), asked ${olderThanMs} ms: a caller that still retries one would run its effect again; pass force (sideeffect purge --force) to purge anyway`,
    );
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
 * The last attempt may or may not have taken effect downstream: the key is `uncertain` and
 * blocked, because a blind retry is how a duplicate happens. Reconcile first. In Temporal the
 * same condition is the failure type `SideEffectOutcomeUncertain`. Code `OUTCOME_UNCERTAIN`
 * (`OUTCOME_UNKNOWN` in 0.1, still matched by {@link hasCode} until 0.3).
 */
export class OutcomeUncertainError extends SideEffectError {
  readonly code = 'OUTCOME_UNCERTAIN';
  constructor(
    readonly key: string,
    readonly resource: string,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(
      `outcome of "${key}" on "${resource}" is uncertain (${reason}): reconcile before retrying`,
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
 * A resolution named another attempt (fence) of the key than the one the store has: it was made
 * about an earlier uncertain attempt (the key was since resolved, re-applied and became uncertain
 * again), or about none that exists. Refused, because a verdict judges one attempt: accepted, a
 * "not applied" about attempt 1 would re-run an effect that attempt 2 may already have applied (a
 * second charge). The message names the attempt that stands now, so the person checks that one.
 */
export class StaleVerdictError extends SideEffectError {
  readonly code = 'STALE_VERDICT';
  constructor(
    readonly key: string,
    /** The attempt (fence) the verdict was about. */
    readonly fence: number,
    /** The key's attempt now (the fence of its last grant). */
    readonly currentFence: number,
    /** The key's state now. */
    readonly state: string,
  ) {
    super(staleVerdictMessage(key, fence, currentFence, state));
  }
}

function staleVerdictMessage(key: string, fence: number, current: number, state: string): string {
  const judged = `your verdict judged the attempt with fence ${fence}`;
  if (state === 'uncertain')
    return `the attempt with fence ${current} of "${key}" is the uncertain one now; ${judged}: not recorded. Check the attempt with fence ${current} downstream, then decide it with fence ${current}`;
  return `the latest attempt of "${key}" has fence ${current} (${state}); ${judged}: not recorded, nothing to decide about it`;
}

/**
 * The attempt already has {@link MAX_PENDING_VERDICTS} verdicts pending for a worker's check, so
 * this one was not recorded (nothing else changed: send it again once they are judged, or
 * withdraw one). Unbounded, 20,000 pending verdicts on one key made `show` print 12.6 MB and a
 * worker's judge take 2,000 round trips.
 */
export class PendingVerdictsFullError extends SideEffectError {
  readonly code = 'PENDING_VERDICTS_FULL';
  constructor(
    readonly key: string,
    /** The attempt (fence) whose pending verdicts are full. */
    readonly fence: number,
  ) {
    super(
      `attempt ${fence} of "${key}" already has ${MAX_PENDING_VERDICTS} verdicts pending for a worker's check: yours was not recorded. Send it again once they are judged (sideeffect show "${key}"), or withdraw one (sideeffect withdraw "${key}" --verdict ID --reason TEXT)`,
    );
  }
}

/** How many verdicts may be pending for a worker's check on one attempt of a key (0019). */
export const MAX_PENDING_VERDICTS = 100;

/**
 * The store answered with something this version does not know (a newer schema's answer, a
 * custom Store's bug). Surfaced so nobody guesses a default. Code `UNEXPECTED_STORE_ANSWER`
 * (`UNKNOWN_OUTCOME` in 0.1, still matched by {@link hasCode} until 0.3).
 */
export class UnexpectedStoreAnswerError extends SideEffectError {
  readonly code = 'UNEXPECTED_STORE_ANSWER';
  constructor(readonly outcome: unknown) {
    super(`store returned an answer this version does not know: ${String(outcome)}`);
  }
}

/**
 * The key is already bound to another resource, other parameters, or the other
 * execution mode (`transactional`: used once inside a store transaction and once
 * outside it). Reusing a key for a different action would replay the wrong
 * result; mixing modes would let an at-most-once attempt and an exactly-once
 * one judge the same key by different rules.
 */
export class KeyConflictError extends SideEffectError {
  readonly code = 'KEY_CONFLICT';
  constructor(
    readonly key: string,
    readonly field: 'resource' | 'payload' | 'transactional',
  ) {
    super(
      field === 'transactional'
        ? `key "${key}" is already used by the other execution mode (transactional vs not)`
        : `key "${key}" is already bound to a different ${field}`,
    );
  }
}

/**
 * Another holder has the resource. Retryable: the action has not run, and the
 * same key will be granted once the lease ends. Treating it as final loses the action.
 * A PgStore lease call (renew, complete, markUncertain, release) throws it too when the
 * resource's row stayed locked by another transaction past `lockWaitMs`: nothing was written,
 * and the call may be repeated. So does a PgFencedSink `writeFenced` whose wait for its
 * resource's mark passed its `lockWaitMs` (`key` is then '', the sink knowing no key).
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
      `resource "${resource}" is held by another caller; retry ${key === '' ? '' : `"${key}" `}in ${retryAfterMs} ms`,
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
 * The store's schema lacks what this code needs: never migrated, migrated by an older version, or
 * the worker names another schema (or database) than the one migrated; or, at a worker's start
 * and in the CLI, Postgres refused the user, the password, the database or a privilege. A retry
 * cannot fix that, so it fails at once with the fix in the message, instead of retrying as
 * "store unavailable" for ever.
 */
export class StoreMisconfiguredError extends SideEffectError {
  readonly code = 'STORE_MISCONFIGURED';
  constructor(
    /** The schema the code looked in, when known. */
    readonly schema: string | undefined,
    problem: string,
    cause?: unknown,
    /** What to do, when it is not to migrate (Postgres refused the user, database or privilege). */
    fix?: string,
  ) {
    const name = schema ?? '<schema>';
    super(
      `${problem}: ${fix ?? `run \`sideeffect migrate --schema ${name}\` (or \`migrate(pool, { schema: '${name}' })\`) against the database this worker uses, or point the worker at the schema you migrated`}`,
      cause === undefined ? undefined : { cause },
    );
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
 * A transactional effect was asked of a store that cannot run the effect's
 * statements in its own transaction (only PgStore can). Refused up front: run
 * outside the store's transaction, the effect would silently lose its
 * exactly-once guarantee.
 */
export class NotTransactionalError extends SideEffectError {
  readonly code = 'NOT_TRANSACTIONAL';
  constructor(what = 'this store') {
    super(`${what} cannot run transactional effects: use PgStore`);
  }
}

/**
 * A transactional effect's work committed, rolled back or otherwise ended the store's
 * transaction. Its statements could then commit without the key (and run again on the next
 * try), or the key could be recorded for work that was rolled back; so the store refuses it:
 * nothing is recorded, an early COMMIT is made to fail and roll back. The work must run its
 * statements on the transaction it is given and leave ending it to the store.
 */
export class TransactionEndedError extends SideEffectError {
  readonly code = 'TRANSACTION_ENDED';
  constructor(
    readonly key: string,
    options?: { cause?: unknown },
  ) {
    super(
      `transactional effect "${key}" ended the store's transaction itself (COMMIT, ROLLBACK): refused, nothing recorded`,
      options,
    );
  }
}

/**
 * A transactional effect's work did something the store cannot let through its transaction:
 * a `writeFenced`/`readFenced` of a PgFencedSink (a second connection, which waits on the
 * resource's sink mark that this transaction holds: a deadlock until the TTL kills the holder),
 * or, through a transaction-mode pooler, session state that would outlive the commit (a session
 * advisory lock, a SQL `PREPARE`, a temporary table) and reach the pooler's next client, or a
 * `session_replication_role` other than the connection's, under which the store's record of the
 * key would commit without its triggers (`commit-settings`). Refused at once, the transaction
 * rolled back, nothing recorded; never retried, since the same work would do the same again.
 * `misuse` says which.
 */
export class TransactionMisuseError extends SideEffectError {
  readonly code = 'TRANSACTION_MISUSE';
  constructor(
    readonly key: string,
    readonly misuse: 'fenced-sink' | 'session-state' | 'commit-settings',
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(`transactional effect "${key}" refused: ${detail}`, options);
  }
}

/**
 * One of the host's activities has the name of a side-effect activity. Raised
 * at worker start, because letting one silently replace the other would run
 * the wrong code under a name the workflows rely on.
 */
export class ActivityNameClashError extends SideEffectError {
  readonly code = 'ACTIVITY_NAME_CLASH';
  constructor(readonly names: string[]) {
    const quoted = (list: string[]) => list.map((name) => `"${name}"`).join(', ');
    // Each kind of name has its own fix: only an effect's name is yours to choose on our side.
    const library = names.filter((name) => name.startsWith('sideeffect.'));
    const legacy = names.filter((name) => LEGACY_ACTIVITY.test(name));
    const effects = names.filter((name) => !library.includes(name) && !legacy.includes(name));
    const fixes = [
      ...(effects.length
        ? [
            `rename the effect ${quoted(effects)} (its key in the plugin's effects, which is its activity's name), so your activity keeps its name`,
          ]
        : []),
      ...(library.length
        ? [`rename your activity ${quoted(library)}: sideeffect.* names are the library's`]
        : []),
      ...(legacy.length
        ? [
            `${quoted(legacy)} ${legacy.length > 1 ? 'are' : 'is'} a 0.1.0 name, registered for 0.1.0 runs still open: drop them with legacyActivityNames: false once none is, or rename your activity`,
          ]
        : []),
    ];
    super(
      `activity name(s) ${quoted(names)} registered both by your worker and by sideeffect: ${fixes.join('; ')}`,
    );
  }
}

/** The 0.1.0 activity names workers still register (see legacyActivityNames). */
const LEGACY_ACTIVITY = /^(ensureReconcile|inspectKey|resolveKey|probe:.*)$/;

/**
 * The namespace lacks the search attributes ReconcileWorkflow upserts, and the
 * worker was told to require them. Raised at worker start instead of letting
 * every ReconcileWorkflow fail its workflow task in a loop.
 */
export class SearchAttributesMissingError extends SideEffectError {
  readonly code = 'SEARCH_ATTRIBUTES_MISSING';
  constructor(
    readonly namespace: string,
    readonly missing: string[],
    readonly command: string,
  ) {
    super(
      `namespace "${namespace}" lacks the search attribute(s) ${missing.join(', ')}; register them with: ${command}`,
    );
  }
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

const rolledBack = new WeakSet<object>();

/**
 * Marks an error as proof that nothing took effect (a FencedSink rolled its only transaction back
 * before COMMIT) without changing the error itself, so the apply's own error type still reaches
 * the workflow. The Runner then releases the key and lets the call be retried, as for a `safe`
 * effect, instead of paging a person: a dropped connection heals on the next attempt, and a
 * mistake such as a missing table keeps failing with its own message until it is fixed, with
 * nothing left to reconcile. A value that cannot be marked (a thrown string) is wrapped first.
 */
export function markNotApplied(error: unknown): unknown {
  const marked = typeof error === 'object' && error !== null ? error : new Error(String(error));
  rolledBack.add(marked);
  return marked;
}

/** A NotAppliedError, or an error a FencedSink marked with {@link markNotApplied}. */
export function isNotApplied(error: unknown): boolean {
  return (
    error instanceof NotAppliedError ||
    (typeof error === 'object' && error !== null && rolledBack.has(error))
  );
}

/**
 * The Temporal SDK on this worker cannot run the library's waiting workflows: its workflow
 * bundler predates the SDK's fix for webpack >= 5.108 (sdk-typescript#2170), so with the reused V8
 * context every workflow of the worker shares one module cache and a second waiting workflow never
 * wakes. Refused at `Worker.create`, where the fix (`fixedIn`) can still be installed, instead of
 * a caller left running for ever.
 */
export class UnsupportedSdkError extends SideEffectError {
  readonly code = 'UNSUPPORTED_SDK';
  constructor(
    /** The `@temporalio/worker` version found, or `'a prebuilt workflowBundle'`. */
    readonly installed: string,
    /** The first release with the fix to upgrade to. */
    readonly fixedIn: string,
    message: string,
  ) {
    super(message);
  }
}
