/**
 * What the workflows, the activities and operators exchange: activity
 * requests and answers, and the signals, query and update of the
 * ReconcileWorkflow. Kept in one workflow-safe file so the workflow bundle and
 * the Node side cannot drift apart.
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';

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

/**
 * A probe's answer: the downstream knows whether the key took effect.
 * `null` (or `undefined` from the host's probe) means it cannot tell.
 */
export type ProbeAnswer<R = unknown> = { applied: true; result: R } | { applied: false };

/** A decided uncertain key, as subscribers and the store see it. `result` only when applied. */
export interface Verdict<R = unknown> {
  applied: boolean;
  result?: R;
}

/** Asks for a ReconcileWorkflow on the key (started or joined) and subscribes the calling workflow. */
export interface EnsureReconcileRequest extends UncertainDetails {
  effect?: string;
  input?: unknown;
}

/** The store already decided the key: act on `verdict` now, no ReconcileWorkflow is waited for. */
export interface EnsureReconcileResponse {
  verdict?: Verdict;
}

/** A person's (or program's) verdict, exactly as the Temporal UI's signal form or `temporal workflow signal --input` sends it. */
export interface ResolveInput {
  applied: boolean;
  /** The result to record when `applied` (what the effect would have returned); ignored otherwise. */
  result?: unknown;
  /** Mandatory: why it was judged so. Stored with the transition. */
  reason: string;
  /** Who decided. */
  by?: string;
}

/** Input of `ReconcileWorkflow`. Normally built by the `ensureReconcile` and `sweepAndReconcile` activities. */
export interface ReconcileInput extends UncertainDetails {
  /** The effect's name, if known: the probe and the UI use it. */
  effect?: string;
  /** The effect's input, handed to its probe. */
  input?: unknown;
  /** The effect has a `probe:<effect>` activity registered. */
  probe?: boolean;
  /** How often to log a reminder while nobody decided. Default one hour. */
  remindEveryMs?: number;
  /** Upsert SideEffectState as the workflow moves on. Default true; false where those search attributes are not registered. */
  searchAttributes?: boolean;
}

/** How a reconcile ended; the ReconcileWorkflow's result and the Update's answer. */
export interface ReconcileResolution<R = unknown> extends Verdict<R> {
  key: string;
  reason: string;
  by?: string;
  /** `store` when the key had already been decided elsewhere (first resolution wins). */
  decidedBy: 'probe' | 'signal' | 'update' | 'store';
}

/** A `resolve` signal that was refused, kept so an operator sees why nothing happened. */
export interface RejectedResolve {
  at: string;
  input: unknown;
  error: string;
}

/** The `status` query's answer. */
export interface ReconcileStatus {
  key: string;
  resource: string;
  reason: string;
  effect?: string;
  state: 'checking' | 'probing' | 'waiting' | 'resolving' | 'resolved';
  waitingSince: string;
  rejected: RejectedResolve[];
  subscribers: string[];
  resolution?: ReconcileResolution;
}

/** A workflow waiting on the key; carries the effect so a reconcile started without it (by the sweeper) can still probe. */
export interface Subscription {
  workflowId: string;
  effect?: string;
  input?: unknown;
  probe?: boolean;
}

/** Sent to every subscriber once the key is decided. */
export interface Reconciled extends Verdict {
  key: string;
}

/** The workflow id of the one ReconcileWorkflow per key. */
export const reconcileWorkflowId = (key: string): string => `reconcile/${key}`;

/** Operators: `temporal workflow signal --workflow-id reconcile/<key> --name resolve --input '{"applied":false,"reason":"..."}'`. */
export const resolveSignal = defineSignal<[ResolveInput]>('resolve');
/** Programmatic callers: rejected synchronously by its validator when malformed; answers the final resolution. */
export const resolveUpdate = defineUpdate<ReconcileResolution, [ResolveInput]>('resolve');
/** Where a reconcile stands, with the refused signals: what an operator looks at in the UI's Queries tab. */
export const statusQuery = defineQuery<ReconcileStatus>('status');
/** Sent by `ensureReconcile` (signal-with-start) so the waiting workflow is told the verdict. */
export const subscribeSignal = defineSignal<[Subscription]>('subscribe');
/** The verdict, sent to every subscribed workflow; `sideEffect()` waits for it. */
export const reconciledSignal = defineSignal<[Reconciled]>('reconciled');

/** Activity type of an effect's probe. */
export const probeActivityName = (effect: string): string => `probe:${effect}`;

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
