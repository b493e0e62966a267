import {
  ApplicationFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  currentUpdateInfo,
  log,
  metricMeter,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  setWorkflowOptions,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { SideEffectFailureType } from '../protocol/failures.js';
import {
  type DecidedByLabel,
  RECONCILES_OPENED_METRIC,
  type RefusalLabel,
} from '../protocol/metrics.js';
import { resolveInputError } from '../protocol/resolve-input.js';
import { subscriptionError } from '../protocol/signal-input.js';
import {
  CLI_UPDATE_ID_PREFIX,
  legacyActivityNames,
  legacyProbeActivityName,
  libraryActivityNames,
  type PendingVerdictSummary,
  probeActivityName,
  type ReconcileCarried,
  type ReconcileInput,
  type ReconcileResolution,
  type ReconcileStatus,
  type RejectedResolve,
  type ResolveInput,
  recheckSignal,
  resolveSignal,
  resolveUpdate,
  type Subscription,
  searchAttributeKeys,
  statusQuery,
  subscribeSignal,
  type Verdict,
} from '../protocol/wire.js';
import { holds, takePatch } from './patch.js';
import { pendingDetails } from './pending-details.js';
import {
  carries,
  notifySubscribers,
  probe,
  recordRefusal,
  recordResolution,
  upsertLateSearchAttributes,
} from './reconcile-actions.js';
import { waitingDetails } from './reconcile-details.js';
import {
  describe,
  heldFenceError,
  keptInput,
  lateVerdict,
  MAX_REJECTED,
  type Offer,
  RECHECK_SIGNAL_DESCRIPTION,
  RESOLVE_SIGNAL_DESCRIPTION,
  RESOLVE_UPDATE_DESCRIPTION,
  refusal,
  resolveError,
  resolveInputSizeError,
  STATUS_QUERY_DESCRIPTION,
  SUBSCRIBE_SIGNAL_DESCRIPTION,
} from './reconcile-input.js';
import { readStore } from './store-read.js';
import { type AttemptRefusal, attemptRefusal, judgedVerdict } from './verdict-attempt.js';

const HOUR = 60 * 60 * 1000;
/**
 * Bounds under the server's own `continueAsNewSuggested` (Temporal terminates a run at 51 200
 * events or 50 MB). Kept low because a worker that lost the run from its cache (and a
 * continue-as-new refused because a signal arrived meanwhile does that) replays the whole
 * history in one workflow task: thousands of signals or a megabyte input would make every
 * such task slow enough to time out, and the next attempt slower still.
 */
const CONTINUE_AS_NEW_AFTER_EVENTS = 500;
const CONTINUE_AS_NEW_AFTER_BYTES = 1024 * 1024;
/** A reminder reads the store at most this often, so a short `remindEveryMs` does not turn every reminder into an activity. */
const MIN_STORE_RECHECK_MS = 60_000;

type InspectKey = Parameters<typeof readStore>[0];
type ResolveKey = (
  key: string,
  resolution: ResolveInput,
  about?: { effect?: string; updateId?: string; signal?: number },
) => Promise<Verdict & { decided: boolean }>;
const storeActivities = proxyActivities<Record<string, InspectKey | ResolveKey>>({
  startToCloseTimeout: '1 minute',
});

/** The store activities and the probe's type under the names this run started with (0.1.0 runs keep theirs). */
function activityNames(namespaced: boolean) {
  const names = namespaced ? libraryActivityNames : legacyActivityNames;
  return {
    inspectKey: storeActivities[names.inspectKey] as InspectKey,
    resolveKey: storeActivities[names.resolveKey] as ResolveKey,
    probe: namespaced ? probeActivityName : legacyProbeActivityName,
  };
}

/**
 * Under Worker Versioning, a reconcile follows the current deployment version instead of staying
 * pinned to the one that started it: it may wait for months, and a pinned run would stop being
 * processed once its version's workers are retired. Its code keeps replaying older runs (patches),
 * so moving is safe. Declared only on a worker in a deployment (an unversioned worker reports a
 * build id with no deployment name): the server refuses a versioning behavior from an
 * unversioned worker, failing every task.
 */
setWorkflowOptions(
  () =>
    workflowInfo().currentDeploymentVersion?.deploymentName
      ? { versioningBehavior: 'AUTO_UPGRADE' }
      : {},
  ReconcileWorkflow,
);

/**
 * Decides one uncertain key, exactly once, in the open: workflow id
 * `reconcile/<key>`. It asks the effect's probe first; if the probe cannot
 * tell, it waits for a person's `resolve` signal (UI, CLI) or Update, records
 * the verdict in the store (first resolution wins), tells every subscribed
 * workflow, and returns the resolution. A malformed signal, or a verdict that
 * names no attempt (no `fence`, no `"attempt": "any"`), is kept in the `status`
 * query and ignored, so neither a typo nor a verdict about an earlier attempt
 * decides a payment.
 */
export async function ReconcileWorkflow(input: ReconcileInput): Promise<ReconcileResolution> {
  const { key, resource, reason, effect, carried } = input;
  const remindEveryMs = input.remindEveryMs ?? HOUR;
  const indexed = input.searchAttributes !== false;
  const eventBound = input.continueAsNewAfterEvents ?? CONTINUE_AS_NEW_AFTER_EVENTS;
  const store = activityNames(takePatch('namespacedActivities'));
  const waitingSince = carried?.waitingSince ?? new Date().toISOString();
  const subscribers = new Set<string>(carried?.subscribers);
  // Named in each subscriber's `reconciled` signal, so a caller can tell it from a forged one.
  const subscriberRuns = new Map(Object.entries(carried?.subscriberRuns ?? {}));
  const rejected: RejectedResolve[] = [...(carried?.rejected ?? [])];
  const runs = carried?.runs ?? 0;
  let state: ReconcileStatus['state'] = 'checking';
  let probeFor =
    carried?.probe ?? (input.probe && effect ? { effect, input: input.input } : undefined);
  let probed = carried?.probe?.done ?? false;
  // Whose result check judges a verdict: from the input, else the first subscriber that names it.
  let knownEffect = effect ?? carried?.effect;
  let offer: Offer | undefined;
  let resolution: ReconcileResolution | undefined;
  let decidedBy: DecidedByLabel = 'store';
  // The first wait of a continued run keeps the reminder the previous run had scheduled.
  let remindAt = carried?.remindAt;

  let recheckAsked = false;
  let storeReadAt: number | undefined;
  // `resolve` signals this run has received: the n-th is the n-th such event of its history.
  let resolveSignals = 0;

  const keep = (rejectedResolve: RejectedResolve): void => {
    rejected.push(rejectedResolve);
    if (rejected.length > MAX_REJECTED) rejected.shift();
  };
  // Verdicts pending in the store on this attempt, as the last store read found them.
  let pendingShown: PendingVerdictSummary[] = [];
  const showPending = (waiting: PendingVerdictSummary[]): void => {
    if (waiting.length === 0 && pendingShown.length === 0) return;
    if (!takePatch('pendingVerdictsShown')) return;
    pendingShown = waiting;
    showWaiting();
  };
  const refuse = (raw: unknown, error: string, signal?: string): RejectedResolve => {
    const refused: RejectedResolve = {
      at: new Date().toISOString(),
      ...keptInput(raw),
      error,
      ...(signal ? { signal } : {}),
    };
    rejected.push(refused);
    if (rejected.length > MAX_REJECTED) rejected.shift();
    log.warn(`${signal ?? 'resolve'} refused; still waiting`, { key, error });
    return refused;
  };
  // The attempt this run judges, as its details and its refusals name it.
  const judgedAttempt = {
    ...(input.fence === undefined ? {} : { fence: input.fence }),
    ...(input.attempt?.startedAt === undefined ? {} : { startedAt: input.attempt.startedAt }),
    ...(input.earlier === undefined ? {} : { earlier: input.earlier }),
  };
  // A run held to 0.1 judges its own attempt and refuses `fence`: its templates carry none.
  const namesAttempt = !holds('verdictNamesAttempt') && !holds('resolveSignalFence');
  let lastRefused: RejectedResolve | undefined;
  /** The page's details: rewritten on each refused verdict, so the person who sent it sees why. */
  const showWaiting = (): void => {
    const waiting = waitingDetails({
      key,
      resource,
      reason,
      ...(input.fence === undefined ? {} : { fence: input.fence }),
      ...(input.attempt === undefined ? {} : { attempt: input.attempt }),
      ...(input.earlier === undefined ? {} : { earlier: input.earlier }),
      namesAttempt,
      ...(lastRefused === undefined ? {} : { lastRefused }),
    });
    setCurrentDetails(
      pendingShown.length === 0 ? waiting : `${waiting}\n\n${pendingDetails(key, pendingShown)}`,
    );
  };
  /** A refused verdict: listed in `status`, logged, counted, and shown on the page while it waits. */
  const refuseVerdict = (
    raw: unknown,
    error: string,
    refusal: RefusalLabel,
    via: 'signal' | 'update' | 'probe',
    instead?: unknown,
  ): void => {
    const refused = refuse(raw, error);
    // Bounded as the input is: a verdict sent whole would be kept twice.
    if (instead !== undefined) refused.instead = keptInput(instead).input;
    recordRefusal(refusal, via);
    lastRefused = refused;
    if (resolution === undefined) showWaiting();
  };
  /** An Update refused for the attempt it names fails with the same words the status query keeps. */
  const attemptFailure = (refused: AttemptRefusal) =>
    ApplicationFailure.create({
      type: SideEffectFailureType.InvalidAction,
      message: refused.error,
      ...(refused.instead === undefined
        ? {}
        : { details: [{ instead: keptInput(refused.instead).input }] }),
      nonRetryable: true,
    });

  setHandler(
    subscribeSignal,
    (raw: unknown) => {
      const error = subscriptionError(raw);
      if (error) {
        refuse(raw, error, 'subscribe');
        return;
      }
      const subscription = raw as Subscription;
      subscribers.add(subscription.workflowId);
      if (subscription.runId) subscriberRuns.set(subscription.workflowId, subscription.runId);
      knownEffect ??= subscription.effect;
      // A reconcile started by the sweeper does not know the effect; its first subscriber does.
      if (!probeFor && subscription.probe && subscription.effect)
        probeFor = { effect: subscription.effect, input: subscription.input };
    },
    { description: SUBSCRIBE_SIGNAL_DESCRIPTION },
  );
  setHandler(
    recheckSignal,
    () => {
      recheckAsked = true;
    },
    { description: RECHECK_SIGNAL_DESCRIPTION },
  );
  setHandler(
    resolveSignal,
    (raw: unknown) => {
      resolveSignals += 1;
      // A well-formed but oversized verdict went to the store before the size limit (and was
      // refused there): histories of that keep replaying the old way.
      const oversized = resolveInputSizeError(raw);
      const error =
        resolveInputError(raw) ??
        (oversized && takePatch('resolveSizeLimit') ? oversized : undefined) ??
        heldFenceError(raw, input.fence);
      const unnamed = error ? undefined : attemptRefusal(raw as ResolveInput, judgedAttempt);
      if (error) refuseVerdict(raw, error, 'invalid', 'signal');
      else if (unnamed)
        refuseVerdict(raw, unnamed.error, unnamed.refusal, 'signal', unnamed.instead);
      else if (offer)
        refuseVerdict(
          raw,
          `${lateVerdict(offer)}: first resolution wins, this one is ignored`,
          'late',
          'signal',
        );
      else
        offer = {
          resolution: raw as ResolveInput,
          decidedBy: 'signal',
          label: 'signal',
          delivery: { signal: resolveSignals },
        };
    },
    { description: RESOLVE_SIGNAL_DESCRIPTION },
  );
  setHandler(
    resolveUpdate,
    async (resolutionInput) => {
      const unnamed = attemptRefusal(resolutionInput, judgedAttempt);
      if (unnamed) {
        refuseVerdict(resolutionInput, unnamed.error, unnamed.refusal, 'update', unnamed.instead);
        throw attemptFailure(unnamed);
      }
      const updateId = currentUpdateInfo()?.id;
      const cli = updateId?.startsWith(CLI_UPDATE_ID_PREFIX) === true;
      const mine: Offer = {
        resolution: resolutionInput,
        decidedBy: 'update',
        label: cli ? 'cli' : 'update',
        ...(updateId === undefined ? {} : { delivery: { updateId } }),
      };
      // Behind a verdict still on its way to the store: if that one is refused, this one is next
      // (taking no turn would leave this Update waiting for a resolution that never comes).
      if (offer !== undefined)
        await condition(() => offer === undefined || resolution !== undefined);
      if (resolution) return resolution;
      offer = mine;
      await condition(() => resolution !== undefined || mine.refused !== undefined);
      if (resolution) return resolution;
      throw ApplicationFailure.create({
        type: mine.refused!.type ?? SideEffectFailureType.InvalidAction,
        message: mine.refused!.message,
        details: mine.refused!.details ? [...mine.refused!.details] : undefined,
        nonRetryable: true,
      });
    },
    {
      description: RESOLVE_UPDATE_DESCRIPTION,
      validator: (resolutionInput) => {
        const error = resolveError(resolutionInput);
        if (error) throw new TypeError(error);
      },
    },
  );
  setHandler(
    statusQuery,
    () => {
      const status: ReconcileStatus = {
        key,
        resource,
        reason,
        state,
        waitingSince,
        rejected: [...rejected],
        subscribers: [...subscribers],
        runs,
      };
      if (effect) status.effect = effect;
      if (input.fence !== undefined) status.fence = input.fence;
      if (input.attempt !== undefined) status.attempt = input.attempt;
      if (input.earlier !== undefined) status.earlier = input.earlier;
      if (resolution) status.resolution = resolution;
      if (pendingShown.length > 0) status.pending = [...pendingShown];
      return status;
    },
    { description: STATUS_QUERY_DESCRIPTION },
  );

  // A continued run inherits memo and search attributes from the run before.
  if (!carried) upsertMemo({ key, resource, reason, ...(effect ? { effect } : {}) });
  if (indexed && !carried) {
    upsertSearchAttributes([
      { key: searchAttributeKeys.key, value: key },
      { key: searchAttributeKeys.resource, value: resource },
      { key: searchAttributeKeys.state, value: 'waiting' },
    ]);
  }
  showWaiting();
  // Once per uncertain attempt, not again after a continue-as-new.
  if (workflowInfo().continuedFromExecutionRunId === undefined)
    metricMeter
      .createCounter(
        RECONCILES_OPENED_METRIC,
        'reconciles',
        'uncertain keys a reconcile opened for',
      )
      .add(1, { effect: effect ?? 'unknown' });

  // A continued run of a memo-only reconcile: the attributes may have been registered meanwhile.
  if (carried) await upsertLateSearchAttributes(key, resource);
  const settled = await readStore(store.inspectKey, key, knownEffect, keep, showPending);
  if (settled) {
    resolution = { key, ...settled, reason: 'already decided in the store', decidedBy: 'store' };
  }
  while (!resolution) {
    if (!offer && probeFor && !probed) {
      probed = true;
      state = 'probing';
      const answer = await probe(store.probe(probeFor.effect), key, resource, probeFor.input);
      if (answer) {
        offer ??= {
          resolution: {
            ...answer,
            reason: `probe:${probeFor.effect} found it ${answer.applied ? 'applied' : 'not applied'}`,
            by: `probe:${probeFor.effect}`,
          },
          decidedBy: 'probe',
          label: 'probe',
        };
      }
      continue;
    }
    if (offer) {
      state = 'resolving';
      const current = offer;
      // A verdict judges this run's attempt unless it names one itself.
      const judged = judgedVerdict(current.resolution, input.fence);
      try {
        // Asked where runs that took it recorded its marker, so their histories replay; the
        // context goes to the activity in every run, since activity arguments are no command:
        // a run held to 0.1's commands has the result checked and the sender recorded too.
        takePatch('verdictContext');
        const { decided, ...verdict } = await store.resolveKey(key, judged, {
          ...(knownEffect === undefined ? {} : { effect: knownEffect }),
          ...current.delivery,
        });
        resolution = decided
          ? { key, ...verdict, ...describe(current) }
          : { key, ...verdict, reason: 'already decided in the store', decidedBy: 'store' };
        if (decided) decidedBy = current.label;
      } catch (error) {
        const refused = refusal(error);
        if (refused === undefined) throw error;
        current.refused = refused;
        refuseVerdict(
          current.resolution,
          refused.message,
          'store',
          current.decidedBy === 'update' || current.decidedBy === 'probe'
            ? current.decidedBy
            : 'signal',
        );
        offer = undefined;
      }
      continue;
    }
    state = 'waiting';
    // Whether this run should hand over to a fresh one; asked only once the history is long, so
    // histories recorded before the patch (all short) replay without ever reaching it.
    const handOver = () => historyTooLong(eventBound) && takePatch('reconcileContinueAsNew');
    const pending = () => offer !== undefined || (probeFor !== undefined && !probed);
    const dueIn = remindAt === undefined ? remindEveryMs : Math.max(remindAt - Date.now(), 1);
    remindAt = Date.now() + dueIn;
    // A `recheck` signal wakes the wait only in runs that read the store on it: a run held to
    // 0.1's commands (which knew no such signal) must not cancel its reminder's timer for one.
    const rechecking = () => recheckAsked && takePatch('reconcileRecheckStore');
    const woken = await condition(() => pending() || rechecking() || handOver(), dueIn);
    if (!woken || (recheckAsked && !pending())) {
      const reminder = !woken;
      const asked = recheckAsked;
      recheckAsked = false;
      const due = storeReadAt === undefined || Date.now() - storeReadAt >= MIN_STORE_RECHECK_MS;
      if ((asked || due) && takePatch('reconcileRecheckStore')) {
        storeReadAt = Date.now();
        const decided = await readStore(store.inspectKey, key, knownEffect, keep, showPending);
        if (decided) {
          resolution = { key, ...decided, reason: 'decided in the store', decidedBy: 'store' };
          continue;
        }
      }
      if (asked || due) await upsertLateSearchAttributes(key, resource);
      if (reminder) {
        log.warn('side effect outcome still uncertain: waiting for a resolve signal', {
          key,
          resource,
          reason,
          waitingSince,
          workflowId: workflowInfo().workflowId,
        });
        remindAt = undefined;
      }
      continue;
    }
    if (pending() || !handOver()) {
      remindAt = undefined;
      continue;
    }
    // Signals and Updates still running would be lost with this run: let them finish first.
    await condition(allHandlersFinished);
    if (pending() || recheckAsked) continue;
    const next: ReconcileCarried = {
      waitingSince,
      subscribers: [...subscribers],
      rejected,
      remindAt,
      runs: runs + 1,
      ...(probeFor ? { probe: { ...probeFor, done: probed } } : {}),
      ...(knownEffect === undefined ? {} : { effect: knownEffect }),
      ...(subscriberRuns.size === 0 ? {} : { subscriberRuns: Object.fromEntries(subscriberRuns) }),
    };
    await continueAsNew<typeof ReconcileWorkflow>({ ...input, carried: next });
  }

  state = 'resolved';
  // A run indexed late keeps its state current too.
  if (indexed || carries(searchAttributeKeys.state))
    upsertSearchAttributes([{ key: searchAttributeKeys.state, value: 'resolved' }]);
  setCurrentDetails(
    `Resolved: ${resolution.applied ? 'applied' : 'not applied'} (${resolution.reason}).`,
  );
  recordResolution(decidedBy, resolution.applied, waitingSince);
  await notifySubscribers(key, resolution, subscribers, subscriberRuns);
  await condition(allHandlersFinished);
  return resolution;
}

/** The server suggests continuing (history count or size), or this run passed its own bounds. */
function historyTooLong(eventBound: number): boolean {
  const info = workflowInfo();
  return (
    info.continueAsNewSuggested ||
    info.historyLength > eventBound ||
    info.historySize > CONTINUE_AS_NEW_AFTER_BYTES
  );
}
