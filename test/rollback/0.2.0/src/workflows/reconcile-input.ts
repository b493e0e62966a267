import { ActivityFailure, ApplicationFailure } from '@temporalio/workflow';
import { SideEffectFailureType } from '../protocol/failures.js';
import type { DecidedByLabel } from '../protocol/metrics.js';
import { resolveInputError } from '../protocol/resolve-input.js';
import type { ReconcileResolution, RejectedResolve, ResolveInput } from '../protocol/wire.js';
import { takePatch } from './patch.js';

/** Refused signals kept for the status query; older ones stay in the history. */
export const MAX_REJECTED = 20;
/** A refused input kept whole up to this JSON length; a longer one is kept as its first characters, so `status` stays small. */
const MAX_REJECTED_INPUT_CHARS = 2048;
/**
 * A `resolve` input with longer JSON is refused before anything else is looked at: the store
 * records at most 1 MiB of result, and a few such inputs kept whole would break the `status`
 * query. Counted in characters, not bytes, so a huge input costs one pass, not two.
 */
export const MAX_RESOLVE_INPUT_CHARS = 1024 * 1024;
/** Marks runs that refuse an oversized `resolve` signal in the workflow instead of sending it to the store. */
export const SIZE_LIMIT_PATCH = 'sideeffect-resolve-size-limit';
/**
 * Marks runs that take a `resolve` signal naming the attempt it judges (`fence`). 0.1.0 refused
 * the field as unknown, recording nothing, so a run held to its commands refuses it the same way
 * (a rollback then replays it), and so does the replay of a 0.1.0 history that received one.
 * The Update takes `fence` in every run: a rejected Update leaves no event, and an accepted one is
 * replayed without its validator.
 */
export const SIGNAL_FENCE_PATCH = 'sideeffect-resolve-signal-fence';

/**
 * Why `input` is not a valid `resolve` payload, or undefined if it is: too large for the status
 * query first, then the one validation the store applies too (src/protocol/resolve-input.ts).
 */
export function resolveError(input: unknown): string | undefined {
  return resolveInputSizeError(input) ?? resolveInputError(input);
}

/**
 * Why a `resolve` signal naming an attempt (`fence`) is refused by a run that does not take
 * {@link SIGNAL_FENCE_PATCH} (held to 0.1's commands, or a 0.1.0 history), else undefined.
 */
export function heldFenceError(raw: unknown, fence: number | undefined): string | undefined {
  if (!Object.hasOwn(raw as object, 'fence') || takePatch(SIGNAL_FENCE_PATCH)) return undefined;
  const judged =
    fence === undefined ? '' : ` (it judges attempt ${fence}, the one this run is for)`;
  return `unknown field(s) fence: this worker keeps runs replayable by 0.1 (compatibleWith), whose workers refuse it; send the verdict without "fence"${judged}, or through the resolve Update (sideeffect resolve)`;
}

/** Why `input` is too large to be a `resolve` payload, or undefined. */
export function resolveInputSizeError(input: unknown): string | undefined {
  const length = jsonOf(input)?.length ?? 0;
  if (length > MAX_RESOLVE_INPUT_CHARS)
    return `input is ${length} characters of JSON, over the limit of ${MAX_RESOLVE_INPUT_CHARS}`;
  return undefined;
}

/** The value's JSON text, or undefined for what JSON cannot encode. */
function jsonOf(value: unknown): string | undefined {
  try {
    return JSON.stringify(value);
  } catch {
    return undefined;
  }
}

/** A refused input as the status query keeps it: whole when small, else its first characters and its JSON length. */
export function keptInput(raw: unknown): Pick<RejectedResolve, 'input' | 'inputChars'> {
  const json = jsonOf(raw);
  if (json === undefined) return { input: String(raw).slice(0, MAX_REJECTED_INPUT_CHARS) };
  if (json.length <= MAX_REJECTED_INPUT_CHARS) return { input: raw };
  // Back to whole code points: a cut surrogate pair is not valid text.
  return { input: json.slice(0, MAX_REJECTED_INPUT_CHARS).toWellFormed(), inputChars: json.length };
}

/** What the UI's signal list says about `resolve`. */
export const RESOLVE_SIGNAL_DESCRIPTION =
  'Decide this uncertain key after checking the downstream: {"applied": true, "result": <what the effect returned>, "reason": "...", "by": "...", "fence": <the attempt you checked>} or {"applied": false, "reason": "...", "by": "...", "fence": <the attempt you checked>}; the fence is in the details above and the status query, and a verdict for another attempt is refused. Without "result", "applied": true is refused unless the effect declares result: \'void\'. First resolution wins; a malformed one, or a result the effect\'s check refuses, is listed by the status query and ignored. Safe to batch over the SideEffectState="waiting" query when every key gets the same verdict.';
/** What the UI says about `subscribe`: not for people. */
export const SUBSCRIBE_SIGNAL_DESCRIPTION =
  'Internal, not for people: sent by an effect call (proxySideEffects) in a workflow waiting on this key, to be told the verdict. A malformed one is listed by the status query and ignored.';
/** What the UI says about `recheck`. */
export const RECHECK_SIGNAL_DESCRIPTION =
  'Read the key from the store now and end if it was decided there (sent by `sideeffect resolve` after recording a verdict in the store); also upserts the search attributes registered since this run started. Takes no input; harmless to send.';
/** What the UI says about the `status` query. */
export const STATUS_QUERY_DESCRIPTION =
  'Where this reconcile stands: key, resource, reason, fence, state, and the refused resolve signals with why.';
/** What the UI says about the `resolve` Update. */
export const RESOLVE_UPDATE_DESCRIPTION =
  'Decide this uncertain key and wait for the final resolution; refused synchronously when malformed. Same input as the resolve signal.';

/** A verdict on its way to the store: the first one offered is the one a run records. */
export interface Offer {
  resolution: ResolveInput;
  via: 'probe' | 'signal' | 'update';
  /** Who decided, for the metrics: an Update sent by `sideeffect resolve` counts as `cli`. */
  channel: DecidedByLabel;
  /** Set when the store refused it; an Update waiting on it then fails with it instead of hanging. */
  refused?: ApplicationFailure;
  /** Which message delivered it: the Update's id, or the signal's rank among this run's `resolve` signals. */
  delivery?: { updateId: string } | { signal: number };
}

/** Who got there first, for the one who did not. */
export function lateVerdict(first: Offer): string {
  const by = first.resolution.by ? ` by ${first.resolution.by}` : '';
  return `already decided${by} (${first.via}: ${first.resolution.applied ? 'applied' : 'not applied'})`;
}

/** The resolution's account of who decided, from the offer the store took. */
export function describe(offer: Offer): Pick<ReconcileResolution, 'reason' | 'by' | 'decidedBy'> {
  const { reason, by } = offer.resolution;
  return by === undefined ? { reason, decidedBy: offer.via } : { reason, by, decidedBy: offer.via };
}

/** The store's failures that refuse a verdict rather than fail to record it. */
const REFUSALS = new Set<string>([
  SideEffectFailureType.InvalidAction,
  SideEffectFailureType.StaleVerdict,
]);

/** The store's refusal of a resolution (invalid, or for another episode), or undefined for any other failure. */
export function refusal(error: unknown): ApplicationFailure | undefined {
  if (!(error instanceof ActivityFailure)) return undefined;
  const cause = error.cause;
  if (cause instanceof ApplicationFailure && cause.type && REFUSALS.has(cause.type)) return cause;
  return undefined;
}
