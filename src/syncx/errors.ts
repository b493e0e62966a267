/** Stable machine-readable reasons a syncx primitive refuses its arguments. */
export type SyncxErrorCode = 'INVALID_CAPACITY' | 'INVALID_COUNT';

/**
 * Each code's next step, one of the library's `NextStep` answers (docs/troubleshooting.md, "What
 * to do next"): every refusal here is of an argument. Kept in syncx, which imports nothing.
 */
export const NEXT_BY_SYNCX_CODE: Readonly<Record<SyncxErrorCode, 'fix-and-retry'>> = {
  INVALID_CAPACITY: 'fix-and-retry',
  INVALID_COUNT: 'fix-and-retry',
};

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

  /** What the caller does next, as for the library's other errors: fix the argument. */
  get next(): (typeof NEXT_BY_SYNCX_CODE)[SyncxErrorCode] {
    return NEXT_BY_SYNCX_CODE[this.code];
  }
}
