/**
 * The verdict family, in one place: what a person or a probe decides about one uncertain attempt
 * (applied, or not applied) in each form it travels in. `Verdict` is the decision alone; every
 * other type here is that decision plus what its step adds (why and by whom, the attempt's fence,
 * the store's bookkeeping), so a field every verdict carries is added here once.
 * Pure types: workflow-safe.
 */
import type { Fence, Key, Result } from './types.js';

/**
 * The decision about one uncertain attempt: whether it took effect (`applied`) and, if it did,
 * what it returned. What a waiting call acts on: the result, or running the effect again.
 */
export interface Verdict<R = unknown> {
  applied: boolean;
  /** What the attempt returned; only when `applied`. */
  result?: R;
}

/**
 * A probe's answer: the downstream knows whether the key took effect.
 * `null` (or `undefined` from the host's probe) means it cannot tell.
 */
export type ProbeAnswer<R = unknown> = { applied: true; result: R } | { applied: false };

/**
 * A person's (or program's) verdict, exactly as the Temporal UI's signal form or
 * `temporal workflow signal --input` sends it: the `resolve` signal's and Update's input.
 */
export interface ResolveInput extends Verdict {
  /**
   * The result to record when `applied` (what the effect would have returned); ignored otherwise.
   * @default null
   */
  result?: unknown;
  /** Mandatory: why it was judged so. Stored with the transition. */
  reason: string;
  /** Who decided. */
  by?: string;
  /**
   * The attempt judged: its fence, the key's while it is uncertain (`sideeffect show`, the
   * `status` query). The store refuses a verdict for another attempt; the ReconcileWorkflow fills
   * in its own when this is missing (runs of 0.2 and runs held to 0.1 only: later runs refuse a
   * verdict that names no attempt).
   */
  fence?: number;
  /**
   * `"any"` instead of `fence`: decide the attempt the ReconcileWorkflow run judges, whichever
   * attempt was checked. Only for what holds for any attempt (the downstream has no trace of the
   * key at all); the twin of `sideeffect resolve --any-attempt`. Refused with `fence`, and by
   * runs held to 0.1 (`compatibleWith`), whose workers do not know it.
   */
  attempt?: 'any';
}

/**
 * A person's or a probe's verdict on an uncertain key as the store takes it (`resolveUncertain`,
 * `Runner.resolve`), made after looking at the downstream. `reason` is mandatory: why it was
 * judged applied is worth more later than the verdict itself.
 */
export interface Resolution extends Verdict<Result> {
  /** The result to record when `applied`; ignored otherwise. */
  result?: Result;
  reason: string;
  /** Who decided (a person, a probe); stored with the transition. */
  by?: string;
  /**
   * The Temporal identity that delivered the verdict (the client that sent the signal or Update),
   * stored beside `by`: `by` is whatever the sender typed, this is what its client called itself.
   * Declared by that client too, not authenticated; PgStore records beside it the database role
   * that wrote the event (`KeyEvent.dbUser`), which no caller chooses.
   */
  identity?: string;
  /**
   * The attempt judged: its fence (`KeyRecord.fence` while uncertain). A verdict for another
   * attempt is refused with StaleVerdictError; without one it judges the current attempt.
   */
  fence?: Fence;
}

/** The answer to resolving: this call decided, or the key was already done (first resolution wins). */
export type ResolveOutcome =
  | { outcome: 'resolved'; applied: boolean; result?: Result }
  | { outcome: 'replayed'; applied: true; result: Result };

/** How a reconcile ended; the ReconcileWorkflow's result and the Update's answer. */
export interface ReconcileResolution<R = unknown> extends Verdict<R> {
  key: string;
  reason: string;
  by?: string;
  /**
   * Which way the verdict came: the effect's probe, a `resolve` signal or Update, or `store` when
   * the key had already been resolved elsewhere (first resolution wins). Not who: that is `by`.
   */
  decidedBy: 'probe' | 'signal' | 'update' | 'store';
}

/**
 * Where a pending verdict stands: `pending` until a worker runs the effect's result check on it;
 * `accepted` (it decided the key), `refused` (the check said no: the key stayed uncertain),
 * `late` (another verdict decided the key first, or the key moved on to another attempt: read so
 * as soon as that happened, judged or not) or `withdrawn` (taken back by a person, with why).
 */
export type PendingVerdictState = 'pending' | 'accepted' | 'refused' | 'late' | 'withdrawn';

/**
 * A verdict recorded in the store by someone who could not reach a worker (the CLI past its
 * `--wait`, Temporal down, no ReconcileWorkflow in the namespace). Recorded straight into the key
 * it would skip the effect's `result` check, and a caller would then be handed a result its own
 * check refuses; held, it decides the key only once a worker has checked it.
 */
export interface PendingVerdict extends Resolution {
  /** The store's id for it, increasing in the order verdicts were held. */
  id: number;
  key: Key;
  /** The attempt it judges: the key's fence when it was held (or the one it named). */
  fence: Fence;
  state: PendingVerdictState;
  /** Why it was refused or late. */
  why?: string;
  at: number;
  judgedAt?: number;
}

/** The answer to holding a verdict: held for a worker's check, or the key was already done (first resolution wins). */
export type PendingVerdictOutcome =
  | { outcome: 'held'; verdict: PendingVerdict }
  | { outcome: 'replayed'; applied: true; result: Result };

/** A worker's judgement of a pending verdict: the effect's check passed, or why not. */
export type VerdictJudgement = { accept: true } | { accept: false; why: string };

/** Which pending verdicts of a key to read, a page at a time (oldest first). */
export interface PendingVerdictPage {
  /** Only verdicts with a larger id (the last id of the page before). */
  afterId?: number;
  /** At most this many. @default 100 */
  limit?: number;
  /** Only the verdicts still pending on the key's current (uncertain) attempt. */
  waiting?: boolean;
}

/** Who withdraws a pending verdict, and why (stored with it and as an event on the key). */
export interface Withdrawal {
  reason: string;
  by?: string;
  /** The client identity that sent it, beside `by` (see {@link Resolution.identity}). */
  identity?: string;
}
