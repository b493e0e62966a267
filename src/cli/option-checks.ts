import { parseDuration } from '../protocol/duration.js';
import type { OptionCheck } from './command.js';

/** The refusal of a missing or unreadable duration, also for a required one left out. */
export function durationProblem(name: string): string {
  return `--${name} must be a duration like 30d, 12h, 1h30m or "2 days"`;
}

/**
 * The library's own duration format (what `recheckEvery` takes), so `1h30m` and `'1 hour'` work
 * here too. A bare number is refused: seconds or days, a person cannot tell.
 */
export function duration(value: string, { name, fail }: OptionCheck): number {
  const ms = /^\s*\d+(\.\d+)?\s*$/.test(value) ? undefined : parseDuration(value);
  if (ms === undefined) return fail(durationProblem(name));
  if (ms <= 0) return fail(`--${name} must be more than zero`);
  return ms;
}

/** Digits only, at least 1. */
export function positiveInteger(value: string, { name, fail }: OptionCheck): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < 1)
    return fail(`--${name} must be a positive integer`);
  return n;
}

/** A value that must not be empty (`--token-file ''`), refused with what it should have been. */
export function nonEmpty(problem: string): (value: string, check: OptionCheck) => string {
  return (value, { fail }) => (value === '' ? fail(problem) : value);
}

/** One of a fixed set of words; `problem` lists them. */
export function oneOf<T extends string>(
  allowed: readonly T[],
  problem: string,
): (value: string, check: OptionCheck) => T {
  return (value, { fail }) => (allowed.includes(value as T) ? (value as T) : fail(problem));
}
