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
const MAX_RESOLVE_INPUT_CHARS = 1024 * 1024;

/**
 * Why `input` is not a valid `resolve` payload, or undefined if it is: too large for the status
 * query first, then the one validation the store applies too (src/protocol/resolve-input.ts).
 */
export function resolveError(input: unknown): string | undefined {
  return resolveInputSizeError(input) ?? resolveInputError(input);
}

/**
 * Why a `resolve` signal naming an attempt (`fence`) is refused by a run that does not take
 * the `resolveSignalFence` patch (held to 0.1's commands, or a 0.1.0 history), else undefined.
 */
export function heldFenceError(raw: unknown, fence: number | undefined): string | undefined {
  if (!Object.hasOwn(raw as object, 'fence') || takePatch('resolveSignalFence')) return undefined;
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
  'Decide this uncertain key after checking the downstream: {"applied": true, "result": <what the effect returned>, "reason": "...", "by": "...", "fence": <the attempt you checked>} or {"applied": false, "reason": "...", "by": "...", "fence": <the attempt you checked>}. The details above list this run\'s attempt (fence, start, end) and the verdicts on earlier ones; a verdict without "fence" is refused, one for an attempt no longer uncertain too. "attempt": "any" instead of "fence" decides this run\'s attempt whatever you checked: only when what you found holds for any attempt (the only form a batch over SideEffectState="waiting" can send: run `sideeffect resolve --resource R --any-attempt --dry-run` first). Without "result", "applied": true is refused unless the effect declares result: \'void\'. First resolution wins; a refused verdict is shown in the details and listed by the status query, and decides nothing.';
/** What the UI says about `subscribe`: not for people. */
export const SUBSCRIBE_SIGNAL_DESCRIPTION =
  'Internal, not for people: sent by an effect call (proxySideEffects) in a workflow waiting on this key, to be told the verdict. A malformed one is listed by the status query and ignored.';
/** What the UI says about `recheck`. */
export const RECHECK_SIGNAL_DESCRIPTION =
  'Read the key from the store now and end if it was decided there (sent by `sideeffect resolve` after recording a verdict in the store); also upserts the search attributes registered since this run started. Takes no input; harmless to send.';
/** What the UI says about the `status` query. */
export const STATUS_QUERY_DESCRIPTION =
  'Where this reconcile stands: key, resource, reason, the attempt judged (fence, start, end), the verdicts on earlier attempts, state, and the refused verdicts with why (and, for one naming no attempt, the verdict to send instead).';
/** What the UI says about the `resolve` Update. */
export const RESOLVE_UPDATE_DESCRIPTION =
  'Decide this uncertain key and wait for the final resolution; refused synchronously when malformed. Same input as the resolve signal.';

/** A verdict on its way to the store: the first one offered is the one a run records. */
export interface Offer {
  resolution: ResolveInput;
  /** Which way it came, as the resolution says it. */
  decidedBy: ReconcileResolution['decidedBy'];
  /** The same, as the metrics' `decided_by` label: an Update sent by `sideeffect resolve` counts as `cli`. */
  label: DecidedByLabel;
  /** Set when the store refused it; an Update waiting on it then fails with it instead of hanging. */
  refused?: ApplicationFailure;
  /** Which message delivered it: the Update's id, or the signal's rank among this run's `resolve` signals. */
  delivery?: { updateId: string } | { signal: number };
}

/** Who got there first, for the one who did not. */
export function lateVerdict(first: Offer): string {
  const by = first.resolution.by ? ` by ${first.resolution.by}` : '';
  return `already decided${by} (${first.decidedBy}: ${first.resolution.applied ? 'applied' : 'not applied'})`;
}

/** The resolution's account of why, who (`by`) and which way (`decidedBy`), from the offer the store took. */
export function describe(offer: Offer): Pick<ReconcileResolution, 'reason' | 'by' | 'decidedBy'> {
  const { reason, by } = offer.resolution;
  return by === undefined
    ? { reason, decidedBy: offer.decidedBy }
    : { reason, by, decidedBy: offer.decidedBy };
}

/** The store's failures that refuse a verdict rather than fail to record it. */
const REFUSALS = new Set<string>([
  SideEffectFailureType.InvalidAction,
  SideEffectFailureType.StaleVerdict,
]);

/** The store's refusal of a resolution (invalid, or for another attempt), or undefined for any other failure. */
export function refusal(error: unknown): ApplicationFailure | undefined {
  if (!(error instanceof ActivityFailure)) return undefined;
  const cause = error.cause;
  if (cause instanceof ApplicationFailure && cause.type && REFUSALS.has(cause.type)) return cause;
  return undefined;
}
