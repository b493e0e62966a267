import type { Result } from '../core/types.js';

/**
 * The strict, canonical JSON encoding of effect inputs and results. Inputs become the action's
 * payload, whose digest the key is bound to, so the encoding must be
 * canonical (sorted keys): two retries that built the same input with keys in
 * another order must not read as a key conflict. Results are replayed from
 * these bytes, so anything JSON would silently change (a Map becoming `{}`,
 * NaN becoming null, a BigInt) is refused instead.
 */

const encoder = new TextEncoder();

/** A value that is not JSON, with the path to the offending part (`$.items[2].price`). */
export class NotJsonError extends TypeError {
  constructor(
    readonly path: string,
    what: string,
  ) {
    super(`${path} is not JSON-serialisable: ${what}`);
    this.name = 'NotJsonError';
  }
}

/**
 * Canonical JSON bytes (object keys sorted), readable by the core codec's
 * `decodeJson`. `undefined` (an effect that returns nothing) is stored as
 * `null`, so the first call and every replay see the same value.
 */
export function canonicalJson(value: unknown): Result {
  return {
    payload: encoder.encode(value === undefined ? 'null' : canonical(value, '$', new Set())),
  };
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
