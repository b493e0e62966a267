import { InvalidActionError } from '../core/errors.js';
import type { Resolution } from '../core/types.js';
import { checkResolution } from '../core/validate.js';

/** The fields of a `resolve` payload; anything else is a typo that must not pass silently. */
const RESOLVE_FIELDS: ReadonlySet<string> = new Set(['applied', 'result', 'reason', 'by', 'fence']);

/**
 * Why `input` is not a valid `resolve` payload (signal or Update), or undefined if it is. The
 * fields are judged by the stores' own `checkResolution`, so what the ReconcileWorkflow accepts is
 * what the store accepts: a verdict is never taken from a person and then refused on the way to
 * the store. Only the payload's shape (a JSON object, no unknown field) is checked here.
 * Workflow-safe.
 */
export function resolveInputError(input: unknown): string | undefined {
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    return 'expected one JSON object like {"applied": true, "result": ..., "reason": "...", "by": "..."}';
  const fields = input as Record<string, unknown>;
  const unknown = Object.keys(fields).filter((field) => !RESOLVE_FIELDS.has(field));
  if (unknown.length > 0)
    return `unknown field(s) ${unknown.join(', ')}: only applied, result, reason, by, fence are read`;
  try {
    // `result` travels as JSON here and as bytes in the store; its size is checked when encoded.
    const { result: _result, ...verdict } = fields;
    checkResolution(verdict as unknown as Resolution);
    return undefined;
  } catch (error) {
    if (error instanceof InvalidActionError) return error.message;
    throw error;
  }
}
