/**
 * Validation of the library's internal signals (`subscribe`, `reconciled`, `recheck`). They stay
 * accepted under their 0.1.0 names, since running workflows of older versions still send them,
 * but anyone can send them from the UI or the `temporal` CLI: a handler that trusted its input
 * would fail its workflow task on the first malformed one and wedge the run. Workflow-safe.
 */

/** Temporal's own bound on workflow ids. */
const MAX_ID_CHARS = 1000;
/** An effect name is an activity type. */
const MAX_EFFECT_CHARS = 1000;
/** The effect input a subscriber hands to the probe; the store bounds payloads near this too. */
const MAX_SUBSCRIBE_INPUT_CHARS = 1024 * 1024;

const SUBSCRIPTION_FIELDS: ReadonlySet<string> = new Set([
  'workflowId',
  'runId',
  'effect',
  'input',
  'probe',
]);
const RECONCILED_FIELDS: ReadonlySet<string> = new Set(['key', 'applied', 'result', 'runId']);

/** Why `input` is not a `subscribe` payload (`{ workflowId, effect?, input?, probe? }`), or undefined if it is. */
export function subscriptionError(input: unknown): string | undefined {
  const fields = objectOf(input, SUBSCRIPTION_FIELDS);
  if (typeof fields === 'string') return fields;
  const id = fields.workflowId;
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_CHARS)
    return `workflowId must be a non-empty string of at most ${MAX_ID_CHARS} characters`;
  if (fields.runId !== undefined && !isId(fields.runId))
    return `runId must be a non-empty string of at most ${MAX_ID_CHARS} characters`;
  const effect = fields.effect;
  if (
    effect !== undefined &&
    (typeof effect !== 'string' || effect.length === 0 || effect.length > MAX_EFFECT_CHARS)
  )
    return `effect must be a non-empty string of at most ${MAX_EFFECT_CHARS} characters`;
  if (fields.probe !== undefined && typeof fields.probe !== 'boolean')
    return 'probe must be a boolean';
  const length = jsonLength(fields.input);
  if (length === undefined) return 'input must be JSON';
  if (length > MAX_SUBSCRIBE_INPUT_CHARS)
    return `input is ${length} characters of JSON, over the limit of ${MAX_SUBSCRIBE_INPUT_CHARS}`;
  return undefined;
}

/**
 * Why `input` is not a `reconciled` payload, or undefined if it is. Only `key` is read: the
 * verdict itself is taken from the store, never from the signal.
 */
export function reconciledError(input: unknown): string | undefined {
  const fields = objectOf(input, RECONCILED_FIELDS);
  if (typeof fields === 'string') return fields;
  if (typeof fields.key !== 'string' || fields.key.length === 0)
    return 'key must be a non-empty string';
  if (typeof fields.applied !== 'boolean') return 'applied must be a boolean';
  if (fields.runId !== undefined && !isId(fields.runId))
    return `runId must be a non-empty string of at most ${MAX_ID_CHARS} characters`;
  return undefined;
}

function isId(value: unknown): boolean {
  return typeof value === 'string' && value.length > 0 && value.length <= MAX_ID_CHARS;
}

function objectOf(input: unknown, known: ReadonlySet<string>): Record<string, unknown> | string {
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    return 'expected one JSON object';
  const fields = input as Record<string, unknown>;
  const unknown = Object.keys(fields).filter((field) => !known.has(field));
  if (unknown.length > 0)
    return `unknown field(s) ${unknown.join(', ')}: only ${[...known].join(', ')} are read`;
  return fields;
}

function jsonLength(value: unknown): number | undefined {
  if (value === undefined) return 0;
  try {
    return JSON.stringify(value)?.length ?? 0;
  } catch {
    return undefined;
  }
}
