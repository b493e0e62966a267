import { InvalidActionError, PurgeBelowFloorError } from './errors.js';
import { maskConnectionString } from './mask.js';
import type { Action, RetrySafety } from './types.js';
import type { PendingVerdictPage, Resolution, Withdrawal } from './verdict.js';

/**
 * Limits every store enforces, so a malformed action is refused with a typed
 * error before anything is written, the same way by every implementation.
 */
export interface Limits {
  /**
   * Longest key, in UTF-8 bytes; a longer one is an InvalidActionError, not an index failure.
   * @default 512
   */
  maxKeyBytes: number;
  /**
   * Longest resource name, in UTF-8 bytes.
   * @default 256
   */
  maxResourceBytes: number;
  /**
   * Largest payload and largest result, in bytes: a row this size still moves in one round trip.
   * @default 1048576 (1 MiB)
   */
  maxPayloadBytes: number;
  /**
   * Longest reason of a verdict or an uncertain mark, in UTF-8 bytes.
   * @default 4096
   */
  maxReasonBytes: number;
  /**
   * The longest lease a store grants. A lease of days (or 2^53 ms) held by a worker that died
   * blocks its resource for that long; a mistyped unit (seconds as ms * 1000) is caught here.
   * @default 3_600_000 (1 hour)
   */
  maxTtlMs: number;
  /**
   * The youngest done keys `purge` deletes without `force`. A done key purged while a caller may
   * still retry it (an activity retry, a workflow reset, a caller replaying after an outage) is a
   * fresh key to the store: the effect runs again. Set it to the longest time after an effect
   * completes that anything may still retry it.
   * @default 604_800_000 (7 days)
   */
  minPurgeAgeMs: number;
}

export const defaultLimits: Limits = {
  maxKeyBytes: 512,
  maxResourceBytes: 256,
  maxPayloadBytes: 1024 * 1024,
  maxReasonBytes: 4096,
  maxTtlMs: 60 * 60 * 1000,
  minPurgeAgeMs: 7 * 24 * 60 * 60 * 1000,
};

const retrySafeties: readonly RetrySafety[] = ['unknown', 'safe', 'unsafe'];
const encoder = new TextEncoder();

/** Whether a store could ever have accepted `key`: a reader answers "never seen" for one it could not. */
export function storableKey(key: unknown, limits: Limits = defaultLimits): boolean {
  try {
    checkText('key', key, limits.maxKeyBytes);
    return true;
  } catch {
    return false;
  }
}

/**
 * A text field must survive a round trip through any store byte for byte:
 * no NUL (Postgres text cannot hold it) and no lone surrogate (it would be
 * stored as U+FFFD, making two different keys equal).
 */
export function checkText(
  field: string,
  value: unknown,
  maxBytes: number,
  allowEmpty = false,
): string {
  if (typeof value !== 'string')
    throw new InvalidActionError(field, `must be a string, got ${typeof value}`);
  if (value.length === 0 && !allowEmpty) throw new InvalidActionError(field, 'must not be empty');
  if (value.includes('\0')) throw new InvalidActionError(field, 'must not contain NUL bytes');
  if (!value.isWellFormed()) throw new InvalidActionError(field, 'must be well-formed Unicode');
  // A UTF-16 code unit is at most 3 UTF-8 bytes: short strings need no encoding to be measured.
  if (value.length * 3 <= maxBytes) return value;
  const bytes = encoder.encode(value).length;
  if (bytes > maxBytes)
    throw new InvalidActionError(field, `is ${bytes} bytes, the limit is ${maxBytes}`);
  return value;
}

export function checkBytes(field: string, value: unknown, maxBytes: number): Uint8Array {
  if (!(value instanceof Uint8Array)) throw new InvalidActionError(field, 'must be a Uint8Array');
  if (value.length > maxBytes) {
    throw new InvalidActionError(field, `is ${value.length} bytes, the limit is ${maxBytes}`);
  }
  return value;
}

/** A TTL is a positive whole number of milliseconds; zero would mean a gate that is never held, Infinity one that is never freed. */
export function checkTtl(ttlMs: unknown): number {
  if (typeof ttlMs !== 'number' || !Number.isSafeInteger(ttlMs) || ttlMs <= 0) {
    throw new InvalidActionError(
      'ttlMs',
      `must be a positive integer number of milliseconds, got ${String(ttlMs)}`,
    );
  }
  return ttlMs;
}

/** A lease TTL: a positive whole number of milliseconds, at most `limits.maxTtlMs`. */
export function checkLeaseTtl(ttlMs: unknown, limits: Limits = defaultLimits): number {
  const ttl = checkTtl(ttlMs);
  if (ttl > limits.maxTtlMs) {
    throw new InvalidActionError(
      'ttlMs',
      `is ${ttl} ms, the limit is ${limits.maxTtlMs} ms (limits.maxTtlMs)`,
    );
  }
  return ttl;
}

/** Validates an action and returns it with defaults filled in. */
export function checkAction(action: Action, limits: Limits = defaultLimits): Required<Action> {
  if (typeof action !== 'object' || action === null)
    throw new InvalidActionError('action', 'must be an object');
  const retrySafety = action.retrySafety ?? 'unknown';
  if (!retrySafeties.includes(retrySafety)) {
    throw new InvalidActionError('retrySafety', `must be one of ${retrySafeties.join(', ')}`);
  }
  return {
    key: checkText('key', action.key, limits.maxKeyBytes),
    resource: checkText('resource', action.resource, limits.maxResourceBytes),
    payload: checkBytes('payload', action.payload ?? new Uint8Array(0), limits.maxPayloadBytes),
    retrySafety,
  };
}

/**
 * A reason as it may be stored: masked first (an apply's error may carry a connection string or a
 * token, and reasons are read later by people, dashboards and the CLI), then size-checked.
 */
export function checkReason(reason: unknown, limits: Limits = defaultLimits): string {
  const masked = typeof reason === 'string' ? maskConnectionString(reason) : reason;
  return checkText('reason', masked, limits.maxReasonBytes);
}

/** A verdict's reason and author are read by people later: whitespace alone says nothing. */
function notBlank(field: string, value: string): string {
  if (value.trim().length === 0) throw new InvalidActionError(field, 'must not be blank');
  return value;
}

/**
 * The one validation of a verdict, used by the stores (before anything is written) and, through
 * `resolveInputError`, by the ReconcileWorkflow on every `resolve` signal and Update.
 */
export function checkResolution(
  resolution: Resolution,
  limits: Limits = defaultLimits,
): Resolution {
  if (typeof resolution !== 'object' || resolution === null) {
    throw new InvalidActionError('resolution', 'must be an object');
  }
  if (typeof resolution.applied !== 'boolean')
    throw new InvalidActionError('applied', 'must be a boolean');
  const checked: Resolution = {
    applied: resolution.applied,
    reason: notBlank('reason', checkReason(resolution.reason, limits)),
  };
  if (resolution.by !== undefined)
    checked.by = notBlank('by', checkText('by', resolution.by, limits.maxKeyBytes));
  if (resolution.identity !== undefined)
    checked.identity = notBlank(
      'identity',
      checkText('identity', resolution.identity, limits.maxKeyBytes),
    );
  if (resolution.fence !== undefined) {
    if (!Number.isSafeInteger(resolution.fence) || resolution.fence < 1) {
      throw new InvalidActionError(
        'fence',
        `must be the fence of the uncertain attempt (a positive integer), got ${String(resolution.fence)}`,
      );
    }
    checked.fence = resolution.fence;
  }
  if (resolution.applied) {
    checked.result = {
      payload: checkBytes(
        'result',
        resolution.result?.payload ?? new Uint8Array(0),
        limits.maxPayloadBytes,
      ),
    };
  }
  return checked;
}

/**
 * A purge age: a positive whole number of milliseconds, and at least `limits.minPurgeAgeMs` unless
 * `force` (PurgeBelowFloorError otherwise, nothing deleted).
 */
export function checkPurge(
  options: { olderThanMs: number; force?: boolean },
  limits: Limits = defaultLimits,
): number {
  const olderThanMs = checkTtl(options?.olderThanMs);
  if (olderThanMs < limits.minPurgeAgeMs && options.force !== true) {
    throw new PurgeBelowFloorError(olderThanMs, limits.minPurgeAgeMs);
  }
  return olderThanMs;
}

/** The most pending verdicts one read returns, and how many it returns unless told. */
const MAX_PENDING_PAGE = 1000;
const DEFAULT_PENDING_PAGE = 100;

/** A page of pending verdicts checked: afterId a non-negative integer, limit 1 to 1,000. */
export function checkPendingPage(page: PendingVerdictPage = {}): Required<PendingVerdictPage> {
  const { afterId = 0, limit = DEFAULT_PENDING_PAGE, waiting = false } = page;
  if (!Number.isSafeInteger(afterId) || afterId < 0)
    throw new InvalidActionError(
      'afterId',
      `must be a non-negative integer, got ${String(afterId)}`,
    );
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_PENDING_PAGE)
    throw new InvalidActionError(
      'limit',
      `must be an integer from 1 to ${MAX_PENDING_PAGE}, got ${String(limit)}`,
    );
  return { afterId, limit, waiting: waiting === true };
}

/** A withdrawal checked: a reason (mandatory, like a verdict's) and, if given, who. */
export function checkWithdrawal(
  withdrawal: Withdrawal,
  limits: Limits = defaultLimits,
): Withdrawal {
  if (typeof withdrawal !== 'object' || withdrawal === null)
    throw new InvalidActionError('withdrawal', 'must be an object with a reason');
  const reason = notBlank('reason', checkReason(withdrawal.reason, limits));
  const by =
    withdrawal.by === undefined
      ? undefined
      : notBlank('by', checkText('by', withdrawal.by, limits.maxKeyBytes));
  const identity =
    withdrawal.identity === undefined
      ? undefined
      : checkText('identity', withdrawal.identity, limits.maxKeyBytes);
  return {
    reason,
    ...(by === undefined ? {} : { by }),
    ...(identity === undefined ? {} : { identity }),
  };
}
