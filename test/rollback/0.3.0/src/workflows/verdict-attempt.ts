/**
 * Which attempt a person's verdict judges. The page a person opens for `reconcile/<key>` shows
 * the key's latest run, so a verdict that names no attempt, sent after checking an earlier one,
 * would decide the latest attempt, which nobody checked (a second charge). Runs of 0.3 on refuse
 * it; `"attempt": "any"` says on purpose that the verdict holds whatever the attempt.
 */
import { ANY_ATTEMPT, fencePlaceholder, RESULT_PLACEHOLDER } from '../protocol/resolve-input.js';
import type { EarlierVerdict, ResolveInput } from '../protocol/wire.js';
import { takePatch } from './patch.js';

/** What a run knows about the attempt it judges, for the refusal's words. */
export interface JudgedAttempt {
  /** Its fence, when the run was told (runs started by 0.2 workers on). */
  fence?: number;
  startedAt?: string;
  earlier?: readonly EarlierVerdict[];
}

/** Why a verdict is refused for the attempt it names (or does not), and what to send instead. */
export interface AttemptRefusal {
  error: string;
  /** The verdict to send once the person has put in the attempt they checked. */
  instead?: unknown;
  /** The `refusal` label of the refused-verdicts metric. */
  refusal: 'no_attempt' | 'placeholder' | 'invalid';
}

/**
 * Why `raw` (a well-formed `resolve` payload) is refused for the attempt it names, or undefined.
 * The patch is asked only for a verdict without `fence`, or with the template's `result`
 * placeholder: a fenced verdict is judged as before in every run. Without the patch (a run
 * held to 0.1, a history recorded before), a fence-less verdict judges the run's attempt and
 * `attempt` is an unknown field, as 0.1.0 and 0.2.0 did.
 */
export function attemptRefusal(raw: ResolveInput, run: JudgedAttempt): AttemptRefusal | undefined {
  const named = raw.fence !== undefined;
  const placeholder = raw.result === RESULT_PLACEHOLDER;
  if (named && !placeholder) return undefined;
  if (!takePatch('verdictNamesAttempt')) {
    if (raw.attempt === undefined) return undefined;
    const judged = run.fence === undefined ? '' : `: this run judges attempt ${run.fence}`;
    return {
      error: `unknown field(s) attempt: this worker keeps runs replayable by 0.1 (compatibleWith), whose workers refuse it; send the verdict without "attempt"${judged}`,
      refusal: 'invalid',
    };
  }
  if (placeholder)
    return {
      error: `result is still the template's placeholder ${JSON.stringify(RESULT_PLACEHOLDER)}: write what the effect returned (the JSON its caller gets), or leave "result" out if the effect declares result: 'void'`,
      refusal: 'placeholder',
    };
  if (raw.attempt === ANY_ATTEMPT) return undefined;
  return {
    error: unnamedError(run),
    instead: { ...raw, fence: fencePlaceholder(run.fence) },
    refusal: 'no_attempt',
  };
}

/** The refusal of a verdict naming no attempt: which one this run judges, and the earlier ones' verdicts. */
function unnamedError(run: JudgedAttempt): string {
  const latest =
    run.fence === undefined
      ? 'this run judges the attempt uncertain now'
      : `this run judges attempt ${run.fence}${run.startedAt ? `, started ${run.startedAt}` : ''}`;
  const decided = (run.earlier ?? []).map(
    (verdict) =>
      `attempt ${verdict.fence} was decided ${verdict.applied ? 'applied' : 'not applied'} by ${verdict.by} at ${verdict.at}`,
  );
  return [
    `names no attempt: add "fence": the attempt you checked (${latest})`,
    ...(decided.length > 0 ? [`${decided.join('; ')}`] : []),
    `a verdict about an earlier attempt is refused. "attempt": "${ANY_ATTEMPT}" instead decides attempt ${run.fence ?? 'uncertain now'} whatever you checked: only when what you found holds for any attempt`,
  ].join('; ');
}

/**
 * The verdict as the store judges it: the attempt it names, or this run's for a verdict that
 * names none (`"attempt": "any"`, or a run that took it without the patch).
 */
export function judgedVerdict(
  resolution: ResolveInput,
  runFence: number | undefined,
): ResolveInput {
  const { attempt: _any, ...verdict } = resolution;
  return verdict.fence === undefined && runFence !== undefined
    ? { ...verdict, fence: runFence }
    : verdict;
}
