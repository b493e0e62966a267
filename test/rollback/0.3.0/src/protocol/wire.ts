/**
 * What the workflows, the activities and operators exchange: activity
 * requests and answers, and the signals, query and update of the
 * ReconcileWorkflow. Kept in one workflow-safe file so the workflow bundle and
 * the Node side cannot drift apart.
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { ReconcileResolution, ResolveInput, Verdict } from '../core/verdict.js';

/** The verdicts this protocol carries: one family, defined in src/core/verdict.ts. */
export type { ProbeAnswer, ReconcileResolution, ResolveInput, Verdict } from '../core/verdict.js';

/**
 * The effect activity's default `startToCloseTimeout` (an effect call from a workflow): the
 * longest an apply runs unless the caller says otherwise, so also the worker's default shutdown
 * grace.
 */
export const DEFAULT_EFFECT_TIMEOUT_MS = 5 * 60 * 1000;

/** What an effect activity receives. The key defaults to `<workflowId>/<step>`. */
export interface EffectRequest<I = unknown> {
  /** Names the call inside its workflow; with the workflow id it forms the key. */
  step: string;
  input: I;
  /** Overrides `<workflowId>/<step>`, e.g. to deduplicate across workflows (`refund/<orderId>`). */
  key?: string;
}

/** An effect activity's answer: this call applied it, or it had been applied before. */
export interface EffectResponse<R = unknown> {
  outcome: 'applied' | 'replayed';
  result: R;
  key: string;
}

/** The details of a `SideEffectOutcomeUncertain` failure: enough to find and reconcile the key. */
export interface UncertainDetails {
  key: string;
  resource: string;
  reason: string;
}

/** Asks for a ReconcileWorkflow on the key (started or joined) and subscribes the calling workflow. */
export interface EnsureReconcileRequest extends UncertainDetails {
  effect?: string;
  input?: unknown;
  /**
   * A periodic re-check of a caller already subscribed: subscribe again only if the
   * key's ReconcileWorkflow is gone or does not list the caller (say it was terminated
   * and the sweeper started a fresh one), so rechecks add nothing to its history.
   */
  recheck?: boolean;
}

/** The store already decided the key: act on `verdict` now, no ReconcileWorkflow is waited for. */
export interface EnsureReconcileResponse {
  verdict?: Verdict;
}

/** Input of `ReconcileWorkflow`. Normally built by the `ensureReconcile` and `sweepAndReconcile` activities. */
export interface ReconcileInput extends UncertainDetails {
  /** The effect's name, if known: the probe and the UI use it. */
  effect?: string;
  /** The effect's input, handed to its probe. */
  input?: unknown;
  /** The effect has a `probe:<effect>` activity registered. */
  probe?: boolean;
  /**
   * How often to log a reminder while nobody decided.
   * @default 3_600_000 (1 hour)
   */
  remindEveryMs?: number;
  /**
   * Upsert SideEffectState as the workflow moves on; false where those search attributes are not
   * registered.
   * @default true
   */
  searchAttributes?: boolean;
  /**
   * The attempt this reconcile judges: the fence of the uncertain attempt, from the store's key
   * record. Attached to a verdict that says `"attempt": "any"` (and, in runs held to 0.1, to one
   * naming none), so it cannot decide a later attempt of the key. Absent in runs started before
   * 0.2.0.
   */
  fence?: number;
  /**
   * When the judged attempt started and ended, as the store recorded them: what a person matches
   * against the downstream (together with the fence its writes carry) to tell this attempt from
   * an earlier one. Set by workers of 0.3 on; absent before.
   */
  attempt?: AttemptTimes;
  /**
   * The verdicts on the key's earlier attempts (who, when, what), newest last and at most
   * {@link MAX_EARLIER_VERDICTS}: a person who checked one of those attempts sees it was decided
   * already. Set by workers of 0.3 on.
   */
  earlier?: EarlierVerdict[];
  /**
   * Continue as new past this many history events (or 1 MiB of history), even if the server
   * does not suggest it yet (it also does when `continueAsNewSuggested`); far below Temporal's
   * 51 200-event limit, and small enough to replay in one workflow task.
   * @default 500
   */
  continueAsNewAfterEvents?: number;
  /** Set by the run this one continues: what a wait of months must not forget. */
  carried?: ReconcileCarried;
}

/** When one attempt ran, by the store's clock (ISO 8601). */
export interface AttemptTimes {
  /** When the attempt was granted (its apply began). */
  startedAt?: string;
  /** When it became uncertain. */
  endedAt?: string;
}

/** A verdict on an earlier attempt of the key, as the store recorded it. */
export interface EarlierVerdict {
  fence: number;
  applied: boolean;
  by: string;
  /** When it was recorded (ISO 8601). */
  at: string;
  reason: string;
}

/** The earlier verdicts a ReconcileWorkflow is told about: the latest ones, so its input stays small. */
export const MAX_EARLIER_VERDICTS = 5;

/** What a waiting ReconcileWorkflow hands to its next run when it continues as new. */
export interface ReconcileCarried {
  waitingSince: string;
  subscribers: string[];
  rejected: RejectedResolve[];
  /** The effect to probe (learned from the input or a subscriber) and whether it was already asked. */
  probe?: { effect: string; input: unknown; done: boolean };
  /** When the next reminder is due (epoch ms), so continuing does not push it back. */
  remindAt: number;
  /** How many runs came before this one. */
  runs: number;
  /** The effect learned from a subscriber, whose result check judges verdicts. */
  effect?: string;
  /** The run each subscriber subscribed from, by workflow id, where it said. */
  subscriberRuns?: Record<string, string>;
}

/** A `resolve` signal that was refused, kept so an operator sees why nothing happened. */
export interface RejectedResolve {
  at: string;
  /** The input as sent; when its JSON is over 2,048 characters, its first 2,048 as a string (see `inputChars`). */
  input: unknown;
  error: string;
  /** Set when `input` was cut: the length of the whole input's JSON. */
  inputChars?: number;
  /** The signal refused when it was not `resolve` (say a malformed `subscribe` sent from the UI). */
  signal?: string;
  /**
   * For a verdict refused because it named no attempt: the same verdict with the attempt to fill
   * in (a placeholder naming the latest), to send once the person knows which attempt they checked.
   */
  instead?: unknown;
}

/**
 * What `inspectKey` answers when the ReconcileWorkflow names its effect (runs with the
 * `sideeffect-held-verdicts` patch): the verdict that stands, or null while the key is uncertain,
 * and the verdicts pending in the store for a worker's check that this read refused.
 */
export interface InspectAnswer {
  verdict: Verdict | null;
  refused: Array<Pick<RejectedResolve, 'at' | 'input' | 'error'>>;
  /** The verdicts still pending on the attempt after this read (the first few), where a worker answers it. */
  pending?: PendingVerdictSummary[];
}

/**
 * A verdict pending in the store for a worker's check, as the `status` query and the run's
 * details show it: a verdict sent through the workflow meanwhile is refused until it is judged or
 * withdrawn (`sideeffect withdraw KEY --verdict ID`), so whoever decides sees it first.
 */
export interface PendingVerdictSummary {
  /** Its id, as `sideeffect show` lists it and `sideeffect withdraw --verdict` takes it. */
  id: number;
  at: string;
  applied: boolean;
  reason: string;
  by?: string;
  /** The attempt it judges. */
  fence: number;
}

/** The `status` query's answer. */
export interface ReconcileStatus {
  key: string;
  resource: string;
  reason: string;
  effect?: string;
  state: 'checking' | 'probing' | 'waiting' | 'resolving' | 'resolved';
  /** The attempt judged, by its fence (see {@link ReconcileInput.fence}). */
  fence?: number;
  /** When the judged attempt started and ended (see {@link ReconcileInput.attempt}). */
  attempt?: AttemptTimes;
  /** The verdicts on the key's earlier attempts (see {@link ReconcileInput.earlier}). */
  earlier?: EarlierVerdict[];
  waitingSince: string;
  rejected: RejectedResolve[];
  subscribers: string[];
  resolution?: ReconcileResolution;
  /** How many earlier runs this wait continued as new from (0 in the first run). */
  runs?: number;
  /** Verdicts pending in the store for a worker's check on this attempt, as of the last store read. */
  pending?: PendingVerdictSummary[];
}

/** A workflow waiting on the key; carries the effect so a reconcile started without it (by the sweeper) can still probe. */
export interface Subscription {
  workflowId: string;
  /**
   * The subscribing run (set by `ensureReconcile`): the reconcile names it in its `reconciled`
   * signal, which a caller held to 0.1's commands trusts only when it names that caller's run.
   */
  runId?: string;
  effect?: string;
  input?: unknown;
  probe?: boolean;
}

/** Sent to every subscriber once the key is decided. */
export interface Reconciled extends Verdict {
  key: string;
  /** The subscriber's run it is meant for, when the subscription named one. */
  runId?: string;
}

/** The workflow id of the one ReconcileWorkflow per key. */
export const reconcileWorkflowId = (key: string): string => `reconcile/${key}`;

/** Operators: `temporal workflow signal --workflow-id reconcile/<key> --name resolve --input '{"applied":false,"reason":"...","fence":N}'`. */
export const resolveSignal = defineSignal<[ResolveInput]>('resolve');
/** Programmatic callers: rejected synchronously by its validator when malformed; answers the final resolution. */
export const resolveUpdate = defineUpdate<ReconcileResolution, [ResolveInput]>('resolve');
/** Where a reconcile stands, with the refused signals: what an operator looks at in the UI's Queries tab. */
export const statusQuery = defineQuery<ReconcileStatus>('status');
/**
 * Internal: sent by `ensureReconcile` (signal-with-start) so the waiting workflow is told the
 * verdict. Validated like `resolve`: a malformed one is kept in `status.rejected` and ignored.
 */
export const subscribeSignal = defineSignal<[Subscription]>('subscribe');
/**
 * Internal: sent to every subscribed workflow once the key is decided; a waiting effect call
 * waits for it. A prompt only: the waiting workflow reads the verdict from the store, so a forged one
 * decides nothing.
 */
export const reconciledSignal = defineSignal<[Reconciled]>('reconciled');
/**
 * Asks a waiting ReconcileWorkflow to read its key from the store now instead of at its next
 * reminder, and to end if the key was decided there (say by `sideeffect resolve` in the store
 * only); a run started before the search attributes were registered also upserts them then.
 * Carries nothing; whatever it carries is ignored.
 */
export const recheckSignal = defineSignal<[]>('recheck');

/**
 * Activity types of the library's own activities, prefixed so they cannot
 * collide with the host's activities on a shared Worker.
 */
export const libraryActivityNames = {
  ensureReconcile: 'sideeffect.ensureReconcile',
  inspectKey: 'sideeffect.inspectKey',
  resolveKey: 'sideeffect.resolveKey',
  sweepAndReconcile: 'sideeffect.sweepAndReconcile',
  registeredSearchAttributes: 'sideeffect.registeredSearchAttributes',
} as const;

/**
 * The 0.1.0 activity types. Workflows started by 0.1.0 keep scheduling them
 * (their histories say so), so workers register them as aliases until those
 * runs are gone.
 */
export const legacyActivityNames = {
  ensureReconcile: 'ensureReconcile',
  inspectKey: 'inspectKey',
  resolveKey: 'resolveKey',
} as const;

/**
 * A `resolve` input laid out as the Temporal UI's signal form lays it out
 * (two-space indent, one field a line). The form reformats single-line JSON on
 * the first Submit click; the dialog grows and that click is lost. Pasting
 * this shape leaves nothing to reformat, so one click sends.
 */
export const verdictJson = (input: ResolveInput): string => JSON.stringify(input, null, 2);

/**
 * The visibility query for ReconcileWorkflows waiting for a person, on one
 * resource or on all: what `temporal workflow signal --query` batches over and
 * what a saved view in the UI lists. `ExecutionStatus="Running"` keeps out a
 * run terminated while waiting (its SideEffectState stays `waiting`), which a
 * batch signal would count as a failure.
 */
export function waitingQuery(resource?: string): string {
  const waiting = `WorkflowType="ReconcileWorkflow" AND ExecutionStatus="Running" AND ${searchAttributeKeys.state.name}="waiting"`;
  if (resource === undefined) return waiting;
  return `${waiting} AND ${searchAttributeKeys.resource.name}=${JSON.stringify(resource)}`;
}

/**
 * Update ids `sideeffect resolve` sends with, so the ReconcileWorkflow can
 * count CLI verdicts apart from other programmatic ones (its metrics only;
 * the resolution still says `decidedBy: 'update'`).
 */
export const CLI_UPDATE_ID_PREFIX = 'sideeffect-cli/';

/** Activity type of an effect's probe. */
export const probeActivityName = (effect: string): string => `sideeffect.probe.${effect}`;

/** The 0.1.0 activity type of an effect's probe, registered as an alias like {@link legacyActivityNames}. */
export const legacyProbeActivityName = (effect: string): string => `probe:${effect}`;

/**
 * The search attributes a ReconcileWorkflow keeps (all Keyword; register them
 * on the namespace, e.g. `temporal operator search-attribute create --name SideEffectState --type Keyword`).
 * Find open reconciliations with `SideEffectState="waiting"`.
 */
export const searchAttributeKeys = {
  key: { name: 'SideEffectKey', type: 'KEYWORD' },
  resource: { name: 'SideEffectResource', type: 'KEYWORD' },
  state: { name: 'SideEffectState', type: 'KEYWORD' },
} as const;
