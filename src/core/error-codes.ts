/**
 * What a caller does about each error and failure this library raises, written once per kind so
 * a switch in user code, the CLI and docs/troubleshooting.md's table cannot disagree. Each map is
 * a `Record` over its kind's codes (syncx, which imports nothing, keeps its own): a new code does
 * not compile until it says what comes next.
 *
 * Workflow-safe (type imports only): `nextStep` reads it off a failure inside a workflow.
 */
import type { SideEffectFailureType } from '../protocol/failures.js';

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
  | 'BREAKER_OPEN'
  | 'FENCE_EXHAUSTED'
  | 'STORE_IS_STANDBY'
  | 'DURABILITY_AT_RISK';

/**
 * What the caller does next, the one field to switch on (restate's terminal / retryable / pause
 * split): `retry` (later, unchanged: the same call can succeed on its own), `wait-for-person`
 * (nothing the code can do: someone must judge, e.g. an uncertain outcome), `fix-and-retry` (the
 * input, the configuration or the deployment is wrong: a retry without a change fails the same
 * way), `final` (settled: nothing to do, and a retry changes nothing).
 */
export type NextStep = 'retry' | 'wait-for-person' | 'fix-and-retry' | 'final';

/** Each error code's next step: what `SideEffectError.next` answers. */
export const NEXT_BY_CODE: Readonly<Record<SideEffectErrorCode, NextStep>> = {
  FENCE_STALE: 'final',
  LEASE_LOST: 'retry',
  INVALID_ACTION: 'fix-and-retry',
  NO_STORE: 'fix-and-retry',
  OUTCOME_UNCERTAIN: 'wait-for-person',
  NOT_UNCERTAIN: 'final',
  STALE_VERDICT: 'fix-and-retry',
  PENDING_VERDICTS_FULL: 'retry',
  UNEXPECTED_STORE_ANSWER: 'fix-and-retry',
  KEY_CONFLICT: 'fix-and-retry',
  CONTENDED: 'retry',
  STORE_UNAVAILABLE: 'retry',
  STORE_MISCONFIGURED: 'fix-and-retry',
  MIGRATION_CONFLICT: 'fix-and-retry',
  ACTIVITY_NAME_CLASH: 'fix-and-retry',
  SEARCH_ATTRIBUTES_MISSING: 'fix-and-retry',
  NOT_TRANSACTIONAL: 'fix-and-retry',
  NOT_APPLIED: 'final',
  INVALID_SCHEMA: 'fix-and-retry',
  PURGE_BELOW_FLOOR: 'fix-and-retry',
  TRANSACTION_ENDED: 'fix-and-retry',
  TRANSACTION_MISUSE: 'fix-and-retry',
  UNSUPPORTED_SDK: 'fix-and-retry',
  BREAKER_OPEN: 'retry',
  FENCE_EXHAUSTED: 'fix-and-retry',
  STORE_IS_STANDBY: 'fix-and-retry',
  DURABILITY_AT_RISK: 'fix-and-retry',
};

/** Each Temporal failure type's next step: what {@link nextStep} answers. */
export const NEXT_BY_FAILURE_TYPE: Readonly<Record<SideEffectFailureType, NextStep>> = {
  SideEffectContended: 'retry',
  SideEffectOutcomeUncertain: 'wait-for-person',
  SideEffectInvalidAction: 'fix-and-retry',
  SideEffectStaleVerdict: 'fix-and-retry',
  SideEffectKeyConflict: 'fix-and-retry',
  SideEffectInvalidResult: 'wait-for-person',
  SideEffectPaused: 'retry',
  SideEffectTooManyInFlight: 'retry',
  SideEffectStoreMisconfigured: 'fix-and-retry',
  SideEffectStoreUnavailable: 'retry',
  SideEffectNotApplied: 'final',
  SideEffectTransactionMisuse: 'fix-and-retry',
  SideEffectMisconfigured: 'fix-and-retry',
};

/**
 * The next step of a failure a workflow caught from a guarded call (an `ActivityFailure`, or the
 * `ApplicationFailure` under it), read from the first failure type of this library on its cause
 * chain; `undefined` for anything else, your own `NotAppliedError` types included (those are
 * yours to map). Pure and workflow-safe: it reads fields, so a workflow may branch on it without
 * changing what it records.
 *
 * @example
 * ```ts
 * try {
 *   await effects.charge(input);
 * } catch (failure) {
 *   if (nextStep(failure) === 'wait-for-person') await notifyOnCall(failure);
 *   throw failure;
 * }
 * ```
 */
export function nextStep(failure: unknown): NextStep | undefined {
  for (let at = failure, depth = 0; typeof at === 'object' && at !== null && depth < 8; depth++) {
    const type = (at as { type?: unknown }).type;
    if (typeof type === 'string' && Object.hasOwn(NEXT_BY_FAILURE_TYPE, type))
      return NEXT_BY_FAILURE_TYPE[type as SideEffectFailureType];
    at = (at as { cause?: unknown }).cause;
  }
  return undefined;
}
