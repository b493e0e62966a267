import { InvalidActionError } from './errors.js';
import type { Result } from './types.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * A value JSON cannot carry faithfully, with the path to the offending part
 * (`$.items[2].price`). Refused rather than silently changed: a Map that
 * became `{}` or a NaN that became null would be replayed wrong forever.
 */
export class NotJsonError extends InvalidActionError {
  constructor(
    readonly path: string,
    what: string,
  ) {
    super(path, `is not JSON-serialisable: ${what}`);
  }
}

/**
 * The one codec between JSON values and stored bytes, shared by activities,
 * the CLI and the reconcile path, so what one records the others read back
 * identically. Canonical (object keys sorted): effect inputs become the
 * payload whose digest a key is bound to, and two retries that built the same
 * input in another key order must not read as a key conflict. `undefined` (an
 * effect that returns nothing) is stored as `null`, so the first call and
 * every replay see the same value.
 */
export function encodeJson(value: unknown): Result {
  return {
    payload: encoder.encode(value === undefined ? 'null' : canonical(value, '$', new Set())),
  };
}

/** Reads back what `encodeJson` stored; an empty payload reads as null. */
export function decodeJson(result: Result): unknown {
  const text = decoder.decode(result.payload);
  return text === '' ? null : JSON.parse(text);
}

function canonical(value: unknown, path: string, open: Set<object>): string {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw new NotJsonError(path, String(value));
      return JSON.stringify(value);
    case 'object':
      break;
    default:
      throw new NotJsonError(path, typeof value);
  }
  if (value === null) return 'null';
  if (open.has(value)) throw new NotJsonError(path, 'circular reference');
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return canonical(toJSON.call(value), path, open);
  open.add(value);
  try {
    if (Array.isArray(value)) {
      const items = value.map((item, index) => {
        if (item === undefined)
          throw new NotJsonError(`${path}[${index}]`, 'undefined in an array');
        return canonical(item, `${path}[${index}]`, open);
      });
      return `[${items.join(',')}]`;
    }
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      throw new NotJsonError(path, `an instance of ${value.constructor?.name ?? 'a class'}`);
    }
    const fields = Object.keys(value)
      .sort()
      .filter((field) => (value as Record<string, unknown>)[field] !== undefined)
      .map((field) => {
        const child = (value as Record<string, unknown>)[field];
        return `${JSON.stringify(field)}:${canonical(child, `${path}.${field}`, open)}`;
      });
    return `{${fields.join(',')}}`;
  } finally {
    open.delete(value);
  }
}
