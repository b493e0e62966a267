import { Context } from '@temporalio/activity';
import { MAX_PENDING_VERDICTS } from '../core/errors.js';
import { decodeJson } from '../core/json.js';
import type { Store } from '../core/store.js';
import { keepsPendingVerdicts } from '../core/store.js';
import type { Key } from '../core/types.js';
import type { PendingVerdict, ResolveInput } from '../core/verdict.js';
import { PENDING_VERDICTS_REFUSED_METRIC } from '../protocol/metrics.js';
import type { PendingVerdictSummary } from '../protocol/wire.js';
import type { AnyEffect } from './effect.js';
import { verdictResultError } from './result-check.js';

/** A pending verdict this worker refused: what the ReconcileWorkflow lists among its refused verdicts. */
interface RefusedPendingVerdict {
  at: string;
  input: ResolveInput & { fence: number };
  error: string;
}

/** What one judge hands back: a bounded activity result, whatever is pending. */
export interface PendingJudgement {
  /** The refused verdicts, the last {@link MAX_LISTED} of them. */
  refused: RefusedPendingVerdict[];
  /** The verdicts still pending on the attempt (no worker here could judge them), the first {@link MAX_LISTED}. */
  waiting: PendingVerdictSummary[];
}

/** How many refused and still pending verdicts one judge lists (the store keeps them all). */
const MAX_LISTED = 5;
/** A listed result longer than this (as JSON) is cut, so the list stays small. */
const MAX_LISTED_RESULT_CHARS = 512;

/**
 * Judges the verdicts pending on `key`'s current attempt, oldest first, with the effect's result
 * check (src/activities/result-check.ts): the first one that passes decides the key (first
 * resolution wins, so the walk stops there: the rest read `late`); a refused one leaves it
 * uncertain, recorded with why, logged and counted. A verdict this worker cannot judge (an applied
 * one while the effect is not known here) stops the walk, so a later verdict never overtakes it;
 * a worker that knows the effect judges it. One read of at most MAX_PENDING_VERDICTS (the store's
 * bound per attempt), so the round trips and the result are bounded whatever was sent.
 */
export async function judgePendingVerdicts(
  store: Store,
  effects: Record<string, AnyEffect>,
  key: Key,
  effectName: () => Promise<string | undefined>,
): Promise<PendingJudgement> {
  if (!keepsPendingVerdicts(store)) return { refused: [], waiting: [] };
  const refused: RefusedPendingVerdict[] = [];
  const pending = await store.pendingVerdicts(key, {
    waiting: true,
    limit: MAX_PENDING_VERDICTS,
  });
  let effect: string | undefined;
  let judgedUpTo = 0;
  let decided = false;
  for (const verdict of pending) {
    let error: string | undefined;
    let result: unknown;
    if (verdict.applied) {
      effect ??= await effectName();
      const known = effect === undefined ? undefined : effects[effect];
      if (known === undefined) break;
      try {
        result = verdict.result && decodeJson(verdict.result);
        error = await verdictResultError(effect, known, result);
      } catch (cause) {
        error = `the result is not JSON: ${cause instanceof Error ? cause.message : String(cause)}`;
      }
    }
    const judged = await store.judgeVerdict(
      verdict.id,
      error === undefined ? { accept: true } : { accept: false, why: error },
    );
    judgedUpTo += 1;
    if (judged?.state === 'accepted') {
      decided = true;
      break;
    }
    if (judged?.state !== 'refused') continue;
    const why = `pending verdict #${verdict.id} refused: ${judged.why ?? error}`;
    warnRefused(key, verdict, why, effect);
    refused.push({
      at: new Date(verdict.at).toISOString(),
      input: {
        applied: verdict.applied,
        ...(verdict.applied ? { result: listedResult(result) } : {}),
        reason: verdict.reason,
        ...(verdict.by === undefined ? {} : { by: verdict.by }),
        fence: verdict.fence,
      },
      error: why,
    });
    if (refused.length > MAX_LISTED) refused.shift();
  }
  const waiting = decided ? [] : pending.slice(judgedUpTo);
  return { refused, waiting: waiting.slice(0, MAX_LISTED).map(pendingSummary) };
}

/** What a person deciding the key sees of a pending verdict: who, when, what, and its id. */
function pendingSummary(verdict: PendingVerdict): PendingVerdictSummary {
  return {
    id: verdict.id,
    at: new Date(verdict.at).toISOString(),
    applied: verdict.applied,
    reason: verdict.reason.length > 200 ? `${verdict.reason.slice(0, 200)}...` : verdict.reason,
    ...(verdict.by === undefined ? {} : { by: verdict.by }),
    fence: verdict.fence,
  };
}

/** A refused result as listed: the result, or its JSON's start when it is long. */
function listedResult(result: unknown): unknown {
  const json = JSON.stringify(result) ?? 'null';
  return json.length > MAX_LISTED_RESULT_CHARS
    ? `${json.slice(0, MAX_LISTED_RESULT_CHARS)}... (${json.length} characters)`
    : result;
}

/** A refused pending verdict is logged and counted: nobody is waiting on the CLI to see it. */
function warnRefused(
  key: Key,
  verdict: PendingVerdict,
  why: string,
  effect: string | undefined,
): void {
  const context = Context.current();
  context.log.warn('pending verdict refused; the key stays uncertain', {
    key,
    id: verdict.id,
    by: verdict.by,
    fence: verdict.fence,
    why,
  });
  context.metricMeter
    .createCounter(
      PENDING_VERDICTS_REFUSED_METRIC,
      'verdicts',
      "pending verdicts a worker's result check refused",
    )
    .add(1, { effect: effect ?? 'unknown' });
}
