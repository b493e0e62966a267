import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { NotUncertainError } from '../core/errors.js';
import { decodeJson, encodeJson } from '../core/json.js';
import { keepsPendingVerdicts, type Store, type SweepCoordination } from '../core/store.js';
import type { KeyRecord, UncertainBacklog } from '../core/types.js';
import type { PendingVerdict } from '../core/verdict.js';
import { SideEffectFailureType } from '../protocol/failures.js';
import {
  type EnsureReconcileRequest,
  type EnsureReconcileResponse,
  type InspectAnswer,
  type ReconcileInput,
  type ResolveInput,
  recheckSignal,
  reconcileWorkflowId,
  resolveSignal,
  type Subscription,
  statusQuery,
  subscribeSignal,
  type Verdict,
} from '../protocol/wire.js';
import { settleAll } from '../syncx/index.js';
import type { ReconcileWorkflow } from '../workflows/reconcile.js';
import type { AnyEffect } from './effect.js';
import { nonRetryable, toFailure } from './failures.js';
import { judgePendingVerdicts, type PendingJudgement } from './pending-verdicts.js';
import { verdictResultError } from './result-check.js';
import type { SearchAttributeRegistration } from './search-attributes.js';

/**
 * ReconcileWorkflow starts a sweep has in flight at once: one after another, a backlog of 200
 * keys after an outage took about 20 s; unbounded, it would flood the frontend.
 */
const SWEEP_START_CONCURRENCY = 16;

/**
 * A key's ReconcileWorkflow is prompted again for a verdict still held after this long, doubling
 * up to PROMPT_MAX_MS: a run that cannot judge it (no effect known yet) gets a few signals an
 * hour, not one per sweep.
 */
const PROMPT_AGAIN_MS = 60_000;
const PROMPT_MAX_MS = 30 * 60_000;

/**
 * What the ReconcileWorkflow knows about a verdict beyond its payload: the effect whose result
 * check judges it, and which message delivered it, so the activity can read the sender's Temporal
 * identity from the run's history (workflow code is never told it).
 */
interface VerdictContext {
  effect?: string;
  /** The Update that delivered it. */
  updateId?: string;
  /** It came as the n-th (1-based) `resolve` signal of the calling run. */
  signal?: number;
}

/**
 * Recorded as the identity of a verdict whose signal carried none: the Temporal web UI sends its
 * signals without one (only the `by` the person types says who), and saying so beats an empty
 * field that reads like a lost record.
 */
const NO_SIGNAL_IDENTITY =
  '(none: the signal carried no identity, as the Temporal web UI sends it)';
/** The same for an Update sent without an identity. */
const NO_UPDATE_IDENTITY = '(none: the Update carried no identity)';

/** What one sweep did: the store's conclusions, the uncertain keys that now have a ReconcileWorkflow (started or already running), and the backlog after it. */
export interface SweepAndReconcileReport {
  uncertain: string[];
  freed: string[];
  reconciling: string[];
  /** Keys with a pending verdict whose ReconcileWorkflow was sent `recheck`. */
  prompted: string[];
  backlog: UncertainBacklog;
}

/** The reconcile side, registered beside the effects. */
export interface ReconcileActivities {
  /** Starts or joins `reconcile/<key>` and subscribes the calling workflow; answers at once if the store already decided. */
  ensureReconcile(request: EnsureReconcileRequest): Promise<EnsureReconcileResponse>;
  /**
   * The store's verdict on the key, or null while it is still uncertain, after judging the
   * verdicts held there for a worker's check (with the effect named in `about`, else the one in
   * the calling ReconcileWorkflow's memo). With `about`, answers an {@link InspectAnswer} that
   * also lists the pending verdicts it refused.
   */
  inspectKey(key: string, about?: { effect?: string }): Promise<Verdict | null | InspectAnswer>;
  /**
   * Records a verdict; `decided: false` when the store had already decided (first resolution
   * wins), with that verdict. Verdicts held in the store before it are judged first. An applied
   * verdict whose result fails the effect's `result` check (the effect named in `about`, else the
   * one in the calling ReconcileWorkflow's memo), or that has no result while the effect does not
   * declare `result: 'void'`, is refused (non-retryable SideEffectInvalidAction) before the store
   * is touched.
   */
  resolveKey(
    key: string,
    resolution: ResolveInput,
    about?: VerdictContext,
  ): Promise<Verdict & { decided: boolean }>;
  /** store.sweep(), then a ReconcileWorkflow for every uncertain key that has none (claimed in the store, so once per uncertain attempt). */
  sweepAndReconcile(): Promise<SweepAndReconcileReport>;
  /**
   * Which of SideEffectKey/SideEffectResource/SideEffectState the namespace has registered (none
   * when this worker keeps them off): a ReconcileWorkflow started memo-only upserts only those,
   * because upserting an unregistered one fails its workflow task in a loop.
   */
  registeredSearchAttributes(): Promise<string[]>;
}

/**
 * The reconcile side, registered beside the effects: start or join the one
 * ReconcileWorkflow per key, read and record verdicts in the store (first
 * resolution wins), and sweep for uncertain keys nobody is reconciling.
 */
export function reconcileActivities({
  store,
  effects,
  client,
  taskQueue,
  reconcileInput,
  registration,
  sweepLimit = 1000,
  restartAfterMs = 60 * 60 * 1000,
}: {
  store: Store & SweepCoordination;
  effects: Record<string, AnyEffect>;
  client: Client;
  taskQueue: string;
  reconcileInput: (details: ReconcileInput) => Promise<ReconcileInput>;
  /** Absent when the search attributes are off for good. */
  registration?: SearchAttributeRegistration;
  sweepLimit?: number;
  restartAfterMs?: number;
}): ReconcileActivities {
  const reconcile: ReconcileActivities = {
    async ensureReconcile(request) {
      const record = await inspect(request.key);
      const verdict = verdictOf(record);
      if (verdict) return { verdict };
      const run = Context.current().info.workflowExecution;
      const subscriber = run?.workflowId;
      if (subscriber === undefined)
        throw nonRetryable(
          SideEffectFailureType.InvalidAction,
          'ensureReconcile runs inside a workflow',
        );
      const { key, resource, reason, effect, input } = request;
      // A verdict pending in the store waits for a worker that knows the effect: this one does.
      const refused = await judged(key, async () => effect);
      if (refused !== undefined) {
        const decided = verdictOf(await inspect(key));
        if (decided) return { verdict: decided };
      }
      if (request.recheck && (await subscribed(key, subscriber))) return {};
      const probe = effect !== undefined && effects[effect]?.probe !== undefined;
      try {
        await client.workflow.signalWithStart<typeof ReconcileWorkflow, [Subscription]>(
          'ReconcileWorkflow',
          {
            workflowId: reconcileWorkflowId(key),
            taskQueue,
            args: [
              await reconcileInput({
                key,
                resource,
                reason,
                effect,
                input,
                probe,
                fence: record!.fence,
              }),
            ],
            signal: subscribeSignal,
            signalArgs: [{ workflowId: subscriber, runId: run!.runId, effect, input, probe }],
            workflowIdConflictPolicy: 'USE_EXISTING',
          },
        );
      } catch (error) {
        throw toFailure(error);
      }
      return {};
    },

    async inspectKey(key, about) {
      const judgement = await judged(key, effectOf(about));
      const verdict = verdictOf(await inspect(key)) ?? null;
      if (about === undefined) return verdict;
      const waiting = verdict === null ? (judgement?.waiting ?? []) : [];
      return {
        verdict,
        refused: judgement?.refused ?? [],
        ...(waiting.length > 0 ? { pending: waiting } : {}),
      };
    },

    async resolveKey(key, resolution, about) {
      const effect = effectOf(about);
      // Another's verdict pending on this attempt came first: the sender is told before anything
      // is decided (judged unseen, it decided the key under them: a second charge).
      await refuseBehindPending(key, resolution);
      // Their own verdict, pending since their wait ran out, may decide the key before this one.
      await judged(key, effect);
      if (resolution.applied) {
        const name = await effect();
        const error = await verdictResultError(
          name,
          name === undefined ? undefined : effects[name],
          resolution.result,
        );
        if (error !== undefined) throw nonRetryable(SideEffectFailureType.InvalidAction, error);
      }
      const identity = await deliveredBy(about);
      try {
        const outcome = await store.resolveUncertain(key, {
          applied: resolution.applied,
          reason: resolution.reason,
          ...(resolution.by === undefined ? {} : { by: resolution.by }),
          ...(identity === undefined ? {} : { identity }),
          ...(resolution.fence === undefined ? {} : { fence: resolution.fence }),
          ...(resolution.applied ? { result: encodeJson(resolution.result) } : {}),
        });
        return outcome.applied
          ? {
              applied: true,
              result: decodeJson(outcome.result!),
              decided: outcome.outcome === 'resolved',
            }
          : { applied: false, decided: true };
      } catch (error) {
        if (!(error instanceof NotUncertainError)) throw toFailure(error);
        return { ...(verdictOf(await inspect(key)) ?? { applied: false }), decided: false };
      }
    },

    async sweepAndReconcile() {
      const { uncertain, freed } = await store.sweep();
      // A store that remembers starts hands out each key once per uncertain attempt; otherwise every
      // uncertain key is started again (use-existing makes that harmless, not free).
      const open = store.claimReconciles
        ? await store.claimReconciles({ limit: sweepLimit, restartAfterMs })
        : await store.list({ state: 'uncertain', limit: sweepLimit, oldest: true });
      const started = await settleAll(
        open.length,
        async (i) => {
          const record = open[i]!;
          await client.workflow.start<typeof ReconcileWorkflow>('ReconcileWorkflow', {
            workflowId: reconcileWorkflowId(record.key),
            taskQueue,
            args: [
              await reconcileInput({
                key: record.key,
                resource: record.resource,
                reason: record.reason ?? 'uncertain',
                fence: record.fence,
              }),
            ],
            workflowIdConflictPolicy: 'USE_EXISTING',
          });
          return record.key;
        },
        { concurrency: SWEEP_START_CONCURRENCY },
      );
      const failed = started.find((start) => start.status === 'rejected');
      // Every start was tried; the first failure fails the sweep, so it is logged and retried.
      if (failed) throw failed.reason;
      const reconciling = started.flatMap((start) =>
        start.status === 'fulfilled' ? [start.value] : [],
      );
      const prompted = await promptPending();
      return { uncertain, freed, reconciling, prompted, backlog: await store.uncertainBacklog() };
    },

    async registeredSearchAttributes() {
      return (await registration?.registered()) ?? [];
    },
  };

  /** When each key with a pending verdict was last prompted, and how many times. */
  const prompts = new Map<string, { count: number; at: number }>();

  /**
   * Sends `recheck` to the ReconcileWorkflow of every key with a verdict held for a worker's
   * check, so it judges the verdict within a sweep of Temporal answering again (the CLI holds one
   * when it could not reach a worker, and its own prompt may have found Temporal down). Backs off
   * per key; a failed signal is tried again at the next sweep.
   */
  async function promptPending(): Promise<string[]> {
    if (!keepsPendingVerdicts(store)) return [];
    const keys = await store.pendingVerdictKeys(sweepLimit);
    const pending = new Set(keys);
    for (const key of prompts.keys()) if (!pending.has(key)) prompts.delete(key);
    const now = Date.now();
    const due = keys.filter((key) => {
      const last = prompts.get(key);
      return (
        last === undefined ||
        now - last.at >= Math.min(PROMPT_AGAIN_MS * 2 ** (last.count - 1), PROMPT_MAX_MS)
      );
    });
    const sent = await settleAll(
      due.length,
      async (i) => {
        const key = due[i]!;
        await client.workflow.getHandle(reconcileWorkflowId(key)).signal(recheckSignal);
        prompts.set(key, { count: (prompts.get(key)?.count ?? 0) + 1, at: now });
        return key;
      },
      { concurrency: SWEEP_START_CONCURRENCY },
    );
    return sent.flatMap((one) => (one.status === 'fulfilled' ? [one.value] : []));
  }

  /**
   * Refuses a verdict sent through the workflow while another person's verdict is pending on the
   * same attempt, naming it (who, when, what) and how to withdraw it. A pending twin of this
   * verdict (the same sender's, recorded when their wait ran out) is no other person's: it is
   * judged first as before.
   */
  async function refuseBehindPending(key: string, resolution: ResolveInput): Promise<void> {
    if (!keepsPendingVerdicts(store)) return;
    const record = await inspect(key);
    if (record?.state !== 'uncertain') return;
    if (resolution.fence !== undefined && resolution.fence !== record.fence) return;
    let waiting: PendingVerdict[];
    try {
      waiting = await store.pendingVerdicts(key, { waiting: true, limit: 10 });
    } catch (error) {
      throw toFailure(error);
    }
    const other = waiting.find(
      (one) =>
        one.applied !== resolution.applied ||
        one.reason !== resolution.reason ||
        (resolution.by !== undefined && one.by !== resolution.by),
    );
    if (other === undefined) return;
    throw nonRetryable(SideEffectFailureType.InvalidAction, behindPendingMessage(key, other));
  }

  /**
   * Judges the verdicts held on an uncertain key (see judgePendingVerdicts); undefined when the key
   * is not uncertain (nothing held on it can decide it).
   */
  async function judged(
    key: string,
    effect: () => Promise<string | undefined>,
  ): Promise<PendingJudgement | undefined> {
    if ((await inspect(key))?.state !== 'uncertain') return undefined;
    try {
      return await judgePendingVerdicts(store, effects, key, effect);
    } catch (error) {
      throw toFailure(error);
    }
  }

  /**
   * The effect whose result check judges a verdict: the one the ReconcileWorkflow named, else the
   * one in its memo (runs held to 0.1's commands name none), asked only when a check needs it.
   */
  function effectOf(about: { effect?: string } | undefined): () => Promise<string | undefined> {
    let memo: Promise<string | undefined> | undefined;
    return async () => {
      if (about?.effect !== undefined) return about.effect;
      memo ??= memoEffect();
      return memo;
    };
  }

  async function memoEffect(): Promise<string | undefined> {
    const run = Context.current().info.workflowExecution;
    if (!run) return undefined;
    try {
      const { memo } = await client.workflow.getHandle(run.workflowId, run.runId).describe();
      return typeof memo?.effect === 'string' ? memo.effect : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * The Temporal identity that sent the signal or Update this verdict came with, read from the
   * calling run's history; undefined when it cannot be told (no such message, history unreadable):
   * the verdict is recorded all the same.
   */
  async function deliveredBy(about: VerdictContext | undefined): Promise<string | undefined> {
    if (about?.updateId === undefined && about?.signal === undefined) return undefined;
    const run = Context.current().info.workflowExecution;
    if (!run) return undefined;
    try {
      const history = await client.workflow.getHandle(run.workflowId, run.runId).fetchHistory();
      let signals = 0;
      for (const event of history.events ?? []) {
        const signaled = event.workflowExecutionSignaledEventAttributes;
        if (signaled?.signalName === resolveSignal.name && ++signals === about.signal)
          return signaled.identity || NO_SIGNAL_IDENTITY;
        const meta = event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.meta;
        if (meta && about.updateId !== undefined && meta.updateId === about.updateId)
          return meta.identity || NO_UPDATE_IDENTITY;
      }
    } catch {
      // Who sent it is worth recording, never worth losing the verdict over.
    }
    return undefined;
  }

  /** Whether the key's ReconcileWorkflow runs and lists `subscriber`; any doubt (gone, no worker to answer) says no, and costs one harmless re-subscribe. */
  async function subscribed(key: string, subscriber: string): Promise<boolean> {
    const handle = client.workflow.getHandle<typeof ReconcileWorkflow>(reconcileWorkflowId(key));
    try {
      const { status } = await handle.describe();
      if (status.name !== 'RUNNING') return false;
      const { subscribers } = await client.connection.withDeadline(Date.now() + 10_000, () =>
        handle.query(statusQuery),
      );
      return subscribers.includes(subscriber);
    } catch {
      return false;
    }
  }

  async function inspect(key: string): Promise<KeyRecord | undefined> {
    try {
      return await store.inspect(key);
    } catch (error) {
      throw toFailure(error);
    }
  }

  return reconcile;
}

/** What the store says about a key: done -> applied with its result; uncertain -> undefined (undecided); anything else -> not applied. */
function verdictOf(record: KeyRecord | undefined): Verdict | undefined {
  if (record?.state === 'uncertain') return undefined;
  if (record?.state === 'done') return { applied: true, result: decodeJson(record.result!) };
  return { applied: false };
}

/** What a person whose verdict waits behind another's pending one is told. */
function behindPendingMessage(key: string, pending: PendingVerdict): string {
  const what = pending.applied ? 'applied' : 'not applied';
  return `not recorded: pending verdict #${pending.id} on attempt ${pending.fence} of "${key}" came first (${what}, by ${pending.by ?? 'unknown'} at ${new Date(pending.at).toISOString()}: ${pending.reason}). It waits for a worker's check and decides the key if it passes. If it is wrong, withdraw it, then send yours again: sideeffect withdraw '${key}' --verdict ${pending.id} --reason TEXT`;
}
