import { ApplicationFailure } from '@temporalio/common';
import {
  FenceExhaustedError,
  InvalidActionError,
  KeyConflictError,
  StaleVerdictError,
  StoreMisconfiguredError,
  StoreUnavailableError,
  TransactionEndedError,
  TransactionMisuseError,
} from '../core/errors.js';
import { SideEffectFailureType } from '../protocol/failures.js';

export function nonRetryable(
  type: string,
  error: unknown,
  details?: unknown[],
): ApplicationFailure {
  return ApplicationFailure.create({
    type,
    message: error instanceof Error ? error.message : String(error),
    nonRetryable: true,
    ...(details ? { details } : {}),
    cause: error instanceof Error ? error : undefined,
  });
}

/** Typed store errors become failures a retry policy handles right; anything else is rethrown (retryable). */
export function toFailure(error: unknown): unknown {
  if (error instanceof InvalidActionError)
    return nonRetryable(SideEffectFailureType.InvalidAction, error);
  if (error instanceof KeyConflictError)
    return nonRetryable(SideEffectFailureType.KeyConflict, error, [
      { key: error.key, field: error.field },
    ]);
  if (error instanceof StaleVerdictError)
    return nonRetryable(SideEffectFailureType.StaleVerdict, error, [
      { key: error.key, fence: error.fence, currentFence: error.currentFence, state: error.state },
    ]);
  if (error instanceof StoreMisconfiguredError)
    return nonRetryable(SideEffectFailureType.StoreMisconfigured, error, [
      { schema: error.schema },
    ]);
  // A grant past the largest exact fence: every retry is refused the same way.
  if (error instanceof FenceExhaustedError)
    return nonRetryable(SideEffectFailureType.StoreMisconfigured, error, [{ code: error.code }]);
  if (error instanceof TransactionEndedError || error instanceof TransactionMisuseError)
    return nonRetryable(SideEffectFailureType.TransactionMisuse, error, [
      { key: error.key, code: error.code },
    ]);
  if (error instanceof StoreUnavailableError) {
    return ApplicationFailure.create({
      type: SideEffectFailureType.StoreUnavailable,
      message: error.message,
      cause: error,
    });
  }
  return error;
}
