import { InvalidActionError } from '../core/errors.js';
import { checkResolution } from '../core/validate.js';
import type { Resolution } from '../core/verdict.js';

/** The fields of a `resolve` payload; anything else is a typo that must not pass silently. */
const RESOLVE_FIELDS: ReadonlySet<string> = new Set([
  'applied',
  'result',
  'reason',
  'by',
  'fence',
  'attempt',
]);

/** The one value of a verdict's `attempt`: decide the attempt the run judges, whichever was checked. */
export const ANY_ATTEMPT = 'any';

/**
 * What the verdict templates put where the person must write the attempt they checked: a text,
 * so a template pasted unchanged is refused instead of deciding the latest attempt.
 */
export const fencePlaceholder = (latest: number | undefined): string =>
  latest === undefined
    ? '<the attempt you checked: sideeffect show KEY prints each fence>'
    : `<the attempt you checked: ${latest} is the latest>`;

/**
 * What the `applied` template puts where the effect's result goes: refused as it stands by runs
 * that name attempts, so it is never recorded as the result.
 */
export const RESULT_PLACEHOLDER = '<what the effect returned, as JSON>';

/**
 * Why `input` is not a valid `resolve` payload (signal or Update), or undefined if it is. The
 * fields are judged by the stores' own `checkResolution`, so what the ReconcileWorkflow accepts is
 * what the store accepts: a verdict is never taken from a person and then refused on the way to
 * the store. Only the payload's shape (a JSON object, no unknown field, `attempt`) is checked
 * here. Whether it names an attempt is the ReconcileWorkflow's to judge (runs held to 0.1 do not
 * ask). Workflow-safe.
 */
export function resolveInputError(input: unknown): string | undefined {
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    return 'expected one JSON object like {"applied": true, "result": ..., "reason": "...", "by": "...", "fence": <the attempt you checked>}';
  const fields = input as Record<string, unknown>;
  const unknown = Object.keys(fields).filter((field) => !RESOLVE_FIELDS.has(field));
  if (unknown.length > 0)
    return `unknown field(s) ${unknown.join(', ')}: only applied, result, reason, by, fence, attempt are read`;
  if (fields.attempt !== undefined && fields.attempt !== ANY_ATTEMPT)
    return `attempt must be "${ANY_ATTEMPT}" (decide the attempt this run judges, whichever you checked), got ${JSON.stringify(fields.attempt)}; to name the attempt you checked, send "fence": N`;
  if (fields.attempt !== undefined && fields.fence !== undefined)
    return `give "fence" (the attempt you checked) or "attempt": "${ANY_ATTEMPT}", not both`;
  if (typeof fields.fence === 'string')
    return `fence is still the template's placeholder ${JSON.stringify(fields.fence)}: write the fence of the attempt you checked, a number (the details list each attempt's fence, start and end)`;
  try {
    // `result` travels as JSON here and as bytes in the store; its size is checked when encoded.
    const { result: _result, attempt: _attempt, ...verdict } = fields;
    checkResolution(verdict as unknown as Resolution);
    return undefined;
  } catch (error) {
    if (error instanceof InvalidActionError) return error.message;
    throw error;
  }
}
