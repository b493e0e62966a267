import { InvalidActionError } from './errors.js';
import type { Result } from './types.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * The one codec between JSON values and stored result bytes, shared by
 * activities, the CLI and the reconcile path, so a result recorded by one is
 * read back identically by the others. Values JSON cannot carry
 * (undefined, functions, BigInt, cycles) are refused instead of silently changed.
 */
export function encodeJson(value: unknown): Result {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw new InvalidActionError('result', `is not JSON-serialisable: ${(error as Error).message}`);
  }
  if (text === undefined)
    throw new InvalidActionError('result', `is not JSON-serialisable: ${typeof value}`);
  return { payload: encoder.encode(text) };
}

export function decodeJson(result: Result): unknown {
  const text = decoder.decode(result.payload);
  return text === '' ? null : JSON.parse(text);
}
