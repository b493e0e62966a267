/** Stable machine-readable reasons a syncx primitive refuses its arguments. */
export type SyncxErrorCode = 'INVALID_CAPACITY' | 'INVALID_COUNT';

/**
 * Thrown synchronously when a primitive is given an argument it cannot honour.
 *
 * Why: a NaN or string capacity silently compares false against every counter, which turns
 * a limit into "never admit" or "admit everything". Failing loudly with a stable `code` lets
 * callers branch on the cause without parsing messages. It extends `TypeError`, as p-limit's
 * argument errors do.
 */
export class SyncxError extends TypeError {
  override readonly name = 'SyncxError';
  readonly code: SyncxErrorCode;

  constructor(code: SyncxErrorCode, message: string) {
    super(message);
    this.code = code;
  }
}
