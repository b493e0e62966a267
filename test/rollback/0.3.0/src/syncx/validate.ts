import { SyncxError } from './errors.js';

/**
 * Normalises a concurrency cap: any integer `<= 0`, and `Infinity`, mean unlimited and come
 * back as `Infinity`, so hot paths need one comparison and no special case.
 */
export function toCapacity(cap: unknown, name: string): number {
  if (typeof cap !== 'number' || !(Number.isInteger(cap) || Math.abs(cap) === Infinity)) {
    throw new SyncxError(
      'INVALID_CAPACITY',
      `${name} must be an integer or Infinity (<= 0 and Infinity mean unlimited), got ${describe(cap)}`,
    );
  }
  return cap <= 0 ? Number.POSITIVE_INFINITY : cap;
}

/** Rejects counts that would loop forever (Infinity) or never (NaN); `<= 0` becomes 0 items. */
export function toCount(n: unknown): number {
  if (typeof n !== 'number' || !Number.isSafeInteger(n)) {
    throw new SyncxError('INVALID_COUNT', `n must be a safe integer, got ${describe(n)}`);
  }
  return Math.max(n, 0);
}

function describe(value: unknown): string {
  return typeof value === 'number' ? String(value) : typeof value;
}
