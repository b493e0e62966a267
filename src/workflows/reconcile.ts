import {
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  currentUpdateInfo,
  getExternalWorkflowHandle,
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
  RECONCILES_RESOLVED_METRIC,
  TIME_TO_RESOLUTION_METRIC,
} from '../protocol/metrics.js';
import { resolveInputError } from '../protocol/resolve-input.js';
import { subscriptionError } from '../protocol/signal-input.js';
import {
  CLI_UPDATE_ID_PREFIX,
  legacyActivityNames,
  legacyProbeActivityName,
  libraryActivityNames,
  namespacedActivitiesPatch,
  type ProbeAnswer,
  probeActivityName,
  type ReconcileCarried,
  type ReconcileInput,
  type ReconcileResolution,
  type ReconcileStatus,
  type RejectedResolve,
  type ResolveInput,
  recheckSignal,
  reconciledSignal,
  resolveSignal,
  resolveUpdate,
  type Subscription,
  searchAttributeKeys,
  statusQuery,
  subscribeSignal,
  type Verdict,
  verdictJson,
  waitingQuery,
} from '../protocol/wire.js';
import { readStore } from './held-verdicts.js';
import { holds, takePatch } from './patch.js';

const HOUR = 60 * 60 * 1000;
/** Refused signals kept for the status query; older ones stay in the history. */
const MAX_REJECTED = 20;
/** A refused input kept whole up to this JSON length; a longer one is kept as its first characters, so `status` stays small. */
const MAX_REJECTED_INPUT_CHARS = 2048;
/**
 * A `resolve` input with longer JSON is refused before anything else is looked at: the store
 * records at most 1 MiB of result, and a few such inputs kept whole would break the `status`
 * query. Counted in characters, not bytes, so a huge input costs one pass, not two.
 */
export const MAX_RESOLVE_INPUT_CHARS = 1024 * 1024;
/**
 * Bounds under the server's own `continueAsNewSuggested` (Temporal terminates a run at 51 200
 * events or 50 MB). Kept low because a worker that lost the run from its cache (and a
 * continue-as-new refused because a signal arrived meanwhile does that) replays the whole
 * history in one workflow task: thousands of signals or a megabyte input would make every
 * such task slow enough to time out, and the next attempt slower still.
 */
const CONTINUE_AS_NEW_AFTER_EVENTS = 500;
const CONTINUE_AS_NEW_AFTER_BYTES = 1024 * 1024;
/** Marks runs that refuse an oversized `resolve` signal in the workflow instead of sending it to the store. */
export const SIZE_LIMIT_PATCH = 'sideeffect-resolve-size-limit';
/** Marks runs that may continue as new; histories recorded before it never do, so they replay unchanged. */
export const CONTINUE_AS_NEW_PATCH = 'sideeffect-reconcile-continue-as-new';
/**
 * Marks runs that read their key from the store on every reminder and on a `recheck` signal, and
 * end once it is decided there: a verdict recorded by any path (the CLI's store-only fallback, a
 * direct `resolveUncertain`) no longer leaves them waiting forever. Histories recorded before it
 * replay their reminders as plain log lines.
 */
export const RECHECK_STORE_PATCH = 'sideeffect-reconcile-recheck-store';
/** A reminder reads the store at most this often, so a short `remindEveryMs` does not turn every reminder into an activity. */
const MIN_STORE_RECHECK_MS = 60_000;
/**
 * Marks runs that tell the store activity, with each verdict, the effect (whose declared `result`
 * check the worker runs before the store is touched) and the signal or Update that delivered it
 * (whose sender's Temporal identity is recorded beside `by`). Activity arguments are no command,
 * so every run now passes them, held by `compatibleWith` or not; the patch is still asked where
 * runs that took it recorded its marker.
 */
export const VERDICT_CONTEXT_PATCH = 'sideeffect-verdict-context';
/**
 * Marks runs that, lacking some of the search attributes (started memo-only, before they were
 * registered), ask the worker which are registered by now at each reminder, `recheck` signal and
 * continue-as-new, and upsert those: a batch over the waiting query then finds reconciles opened
 * before registration. Histories recorded before it never ask.
 */
export const LATE_SEARCH_ATTRIBUTES_PATCH = 'sideeffect-reconcile-late-search-attributes';
/**
 * Marks runs that take a `resolve` signal naming the attempt it judges (`fence`). 0.1.0 refused
 * the field as unknown, recording nothing, so a run held to its commands refuses it the same way
 * (a rollback then replays it), and so does the replay of a 0.1.0 history that received one.
 * The Update takes `fence` in every run: a rejected Update leaves no event, and an accepted one is
 * replayed without its validator.
 */
export const SIGNAL_FENCE_PATCH = 'sideeffect-resolve-signal-fence';

type InspectKey = Parameters<typeof readStore>[0];
type ResolveKey = (
  key: string,
  resolution: ResolveInput,
  about?: { effect?: string; updateId?: string; signal?: number },
) => Promise<Verdict & { decided: boolean }>;
const storeActivities = proxyActivities<Record<string, InspectKey | ResolveKey>>({
  startToCloseTimeout: '1 minute',
});
/** A few tries, then the next reminder asks again: an old worker mid-deploy lacks this activity. */
const registeredSearchAttributes = proxyActivities<Record<string, () => Promise<string[]>>>({
  startToCloseTimeout: '30 seconds',
  retry: { maximumAttempts: 3, initialInterval: '1 second' },
})[libraryActivityNames.registeredSearchAttributes]!;

/** The store activities and the probe's type under the names this run started with (0.1.0 runs keep theirs). */
function activityNames(namespaced: boolean) {
  const names = namespaced ? libraryActivityNames : legacyActivityNames;
  return {
    inspectKey: storeActivities[names.inspectKey] as InspectKey,
    resolveKey: storeActivities[names.resolveKey] as ResolveKey,
    probe: namespaced ? probeActivityName : legacyProbeActivityName,
  };
}

/** Retries a flaky downstream a few times, then leaves the decision to a person rather than looping forever. */
const probeOptions = {
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 5, initialInterval: '1 second', backoffCoefficient: 2 },
} as const;

/**
 * Why `input` is not a valid `resolve` payload, or undefined if it is: too large for the status
 * query first, then the one validation the store applies too (src/protocol/resolve-input.ts).
 */
function resolveError(input: unknown): string | undefined {
  return resolveInputSizeError(input) ?? resolveInputError(input);
}

/**
 * Why a `resolve` signal naming an attempt (`fence`) is refused by a run that does not take
 * {@link SIGNAL_FENCE_PATCH} (held to 0.1's commands, or a 0.1.0 history), else undefined.
 */
function heldFenceError(raw: unknown, fence: number | undefined): string | undefined {
  if (!Object.hasOwn(raw as object, 'fence') || takePatch(SIGNAL_FENCE_PATCH)) return undefined;
  const judged =
    fence === undefined ? '' : ` (it judges attempt ${fence}, the one this run is for)`;
  return `unknown field(s) fence: this worker keeps runs replayable by 0.1 (compatibleWith), whose workers refuse it; send the verdict without "fence"${judged}, or through the resolve Update (sideeffect resolve)`;
}

/** Why `input` is too large to be a `resolve` payload, or undefined. */
function resolveInputSizeError(input: unknown): string | undefined {
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
function keptInput(raw: unknown): Pick<RejectedResolve, 'input' | 'inputChars'> {
  const json = jsonOf(raw);
  if (json === undefined) return { input: String(raw).slice(0, MAX_REJECTED_INPUT_CHARS) };
  if (json.length <= MAX_REJECTED_INPUT_CHARS) return { input: raw };
  // Back to whole code points: a cut surrogate pair is not valid text.
  return { input: json.slice(0, MAX_REJECTED_INPUT_CHARS).toWellFormed(), inputChars: json.length };
}

/** What the UI's signal list and Update list say about `resolve`. */
const RESOLVE_SIGNAL_DESCRIPTION =
  'Decide this uncertain key after checking the downstream: {"applied": true, "result": <what the effect returned>, "reason": "...", "by": "...", "fence": <the attempt you checked>} or {"applied": false, "reason": "...", "by": "...", "fence": <the attempt you checked>}; the fence is in the details above and the status query, and a verdict for another attempt is refused. Without "result", "applied": true is refused unless the effect declares result: \'void\'. First resolution wins; a malformed one, or a result the effect\'s check refuses, is listed by the status query and ignored. Safe to batch over the SideEffectState="waiting" query when every key gets the same verdict.';
const SUBSCRIBE_SIGNAL_DESCRIPTION =
  'Internal, not for people: sent by an effect call (proxySideEffects) in a workflow waiting on this key, to be told the verdict. A malformed one is listed by the status query and ignored.';
const RECHECK_SIGNAL_DESCRIPTION =
  'Read the key from the store now and end if it was decided there (sent by `sideeffect resolve` after recording a verdict in the store); also upserts the search attributes registered since this run started. Takes no input; harmless to send.';
const STATUS_QUERY_DESCRIPTION =
  'Where this reconcile stands: key, resource, reason, fence, state, and the refused resolve signals with why.';
const RESOLVE_UPDATE_DESCRIPTION =
  'Decide this uncertain key and wait for the final resolution; refused synchronously when malformed. Same input as the resolve signal.';

interface Offer {
  resolution: ResolveInput;
  via: 'probe' | 'signal' | 'update';
  /** Who decided, for the metrics: an Update sent by `sideeffect resolve` counts as `cli`. */
  channel: DecidedByLabel;
  /** Set when the store refused it; an Update waiting on it then fails with it instead of hanging. */
  refused?: ApplicationFailure;
  /** Which message delivered it: the Update's id, or the signal's rank among this run's `resolve` signals. */
  delivery?: { updateId: string } | { signal: number };
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
 * workflow, and returns the resolution. A malformed signal is kept in the
 * `status` query and ignored, so a typo never decides a payment.
 */
export async function ReconcileWorkflow(input: ReconcileInput): Promise<ReconcileResolution> {
  const { key, resource, reason, effect, carried } = input;
  const remindEveryMs = input.remindEveryMs ?? HOUR;
  const indexed = input.searchAttributes !== false;
  const eventBound = input.continueAsNewAfterEvents ?? CONTINUE_AS_NEW_AFTER_EVENTS;
  const store = activityNames(takePatch(namespacedActivitiesPatch));
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
  const refuse = (raw: unknown, error: string, signal?: string): void => {
    rejected.push({
      at: new Date().toISOString(),
      ...keptInput(raw),
      error,
      ...(signal ? { signal } : {}),
    });
    if (rejected.length > MAX_REJECTED) rejected.shift();
    log.warn(`${signal ?? 'resolve'} refused; still waiting`, { key, error });
  };

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
        (oversized && takePatch(SIZE_LIMIT_PATCH) ? oversized : undefined) ??
        heldFenceError(raw, input.fence);
      if (error) refuse(raw, error);
      else if (offer)
        refuse(raw, `${lateVerdict(offer)}: first resolution wins, this one is ignored`);
      else
        offer = {
          resolution: raw as ResolveInput,
          via: 'signal',
          channel: 'signal',
          delivery: { signal: resolveSignals },
        };
    },
    { description: RESOLVE_SIGNAL_DESCRIPTION },
  );
  setHandler(
    resolveUpdate,
    async (resolutionInput) => {
      const updateId = currentUpdateInfo()?.id;
      const cli = updateId?.startsWith(CLI_UPDATE_ID_PREFIX) === true;
      const mine: Offer = {
        resolution: resolutionInput,
        via: 'update',
        channel: cli ? 'cli' : 'update',
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
      if (resolution) status.resolution = resolution;
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
  // A run that refuses a fenced signal offers a template without one.
  setCurrentDetails(
    waitingDetails(key, resource, reason, holds(SIGNAL_FENCE_PATCH) ? undefined : input.fence),
  );
  // Once per key episode, not again after a continue-as-new.
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
  const settled = await readStore(store.inspectKey, key, knownEffect, keep);
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
          via: 'probe',
          channel: 'probe',
        };
      }
      continue;
    }
    if (offer) {
      state = 'resolving';
      const current = offer;
      // A verdict judges this run's episode unless it names one itself.
      const judged =
        current.resolution.fence === undefined && input.fence !== undefined
          ? { ...current.resolution, fence: input.fence }
          : current.resolution;
      try {
        // Asked where runs that took it recorded its marker, so their histories replay; the
        // context goes to the activity in every run, since activity arguments are no command:
        // a run held to 0.1's commands has the result checked and the sender recorded too.
        takePatch(VERDICT_CONTEXT_PATCH);
        const { decided, ...verdict } = await store.resolveKey(key, judged, {
          ...(knownEffect === undefined ? {} : { effect: knownEffect }),
          ...current.delivery,
        });
        resolution = decided
          ? { key, ...verdict, ...describe(current) }
          : { key, ...verdict, reason: 'already decided in the store', decidedBy: 'store' };
        if (decided) decidedBy = current.channel;
      } catch (error) {
        const refused = refusal(error);
        if (refused === undefined) throw error;
        current.refused = refused;
        refuse(current.resolution, refused.message);
        offer = undefined;
      }
      continue;
    }
    state = 'waiting';
    // Whether this run should hand over to a fresh one; asked only once the history is long, so
    // histories recorded before the patch (all short) replay without ever reaching it.
    const handOver = () => historyTooLong(eventBound) && takePatch(CONTINUE_AS_NEW_PATCH);
    const pending = () => offer !== undefined || (probeFor !== undefined && !probed);
    const dueIn = remindAt === undefined ? remindEveryMs : Math.max(remindAt - Date.now(), 1);
    remindAt = Date.now() + dueIn;
    // A `recheck` signal wakes the wait only in runs that read the store on it: a run held to
    // 0.1's commands (which knew no such signal) must not cancel its reminder's timer for one.
    const rechecking = () => recheckAsked && takePatch(RECHECK_STORE_PATCH);
    const woken = await condition(() => pending() || rechecking() || handOver(), dueIn);
    if (!woken || (recheckAsked && !pending())) {
      const reminder = !woken;
      const asked = recheckAsked;
      recheckAsked = false;
      const due = storeReadAt === undefined || Date.now() - storeReadAt >= MIN_STORE_RECHECK_MS;
      if ((asked || due) && takePatch(RECHECK_STORE_PATCH)) {
        storeReadAt = Date.now();
        const decided = await readStore(store.inspectKey, key, knownEffect, keep);
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

/**
 * Upserts the search attributes this run lacks that the namespace has registered by now (asked
 * through the worker: upserting an unregistered one would fail the workflow task in a loop).
 * Asks nothing once all are set, so an indexed run never gets here past its first check.
 */
async function upsertLateSearchAttributes(key: string, resource: string): Promise<void> {
  const values = { key, resource, state: 'waiting' };
  const unset = (Object.keys(searchAttributeKeys) as Array<keyof typeof values>).filter(
    (field) => !carries(searchAttributeKeys[field]),
  );
  if (unset.length === 0 || !takePatch(LATE_SEARCH_ATTRIBUTES_PATCH)) return;
  let registered: string[];
  try {
    registered = await registeredSearchAttributes();
  } catch (error) {
    log.warn('could not learn which search attributes are registered; asking again later', {
      key,
      error: error instanceof Error ? error.message : String(error),
    });
    return;
  }
  const pairs = unset
    .filter((field) => registered.includes(searchAttributeKeys[field].name))
    .map((field) => ({ key: searchAttributeKeys[field], value: values[field] }));
  if (pairs.length > 0) upsertSearchAttributes(pairs);
}

/** Whether this run has the search attribute set (at its start, inherited, or upserted since). */
function carries(
  attribute: (typeof searchAttributeKeys)[keyof typeof searchAttributeKeys],
): boolean {
  const info = workflowInfo();
  if (info.typedSearchAttributes.get(attribute) !== undefined) return true;
  // A payload without type metadata shows only in the untyped map.
  return (info.searchAttributes?.[attribute.name]?.length ?? 0) > 0;
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

/**
 * The workflow's details in the UI: what to check and the verdicts to paste,
 * laid out as the signal form lays them out, so the first Submit sends.
 */
function waitingDetails(key: string, resource: string, reason: string, fence?: number): string {
  const episode = fence === undefined ? {} : { fence };
  // No `result` placeholder: pasted as is, `null` (or any stand-in) could become the recorded
  // result. Without one, the effect's check refuses it unless the effect returns nothing.
  const applied = verdictJson({
    applied: true,
    reason: 'found in the downstream',
    by: 'your name',
    ...episode,
  });
  const notApplied = verdictJson({
    applied: false,
    reason: 'not in the downstream',
    by: 'your name',
    ...episode,
  });
  return [
    `**Outcome uncertain** for key \`${key}\` on \`${resource}\`: ${reason}.`,
    'Check the downstream, then More Actions > Send a Signal, name `resolve`, with either (add `"result": <what the effect returned>`; only an effect declared `result: \'void\'` takes it without one):',
    `\`\`\`json\n${applied}\n\`\`\``,
    'or, if it never took effect:',
    `\`\`\`json\n${notApplied}\n\`\`\``,
    `The \`status\` query shows refused signals. Every key waiting on this resource: \`${waitingQuery(resource)}\``,
  ].join('\n\n');
}

/** Metrics only (no commands): safe to emit on any code path, dropped by the SDK during replay. */
function recordResolution(decidedBy: DecidedByLabel, applied: boolean, since: string): void {
  metricMeter
    .createCounter(RECONCILES_RESOLVED_METRIC, 'reconciles', 'reconciles closed, by who decided')
    .add(1, { decided_by: decidedBy, verdict: applied ? 'applied' : 'not_applied' });
  metricMeter
    // No unit: the name says seconds, and the Prometheus exporter's unitSuffix would append `_s`.
    .createHistogram(
      TIME_TO_RESOLUTION_METRIC,
      'float',
      '',
      'from the reconcile start to its verdict, in seconds',
    )
    .record((Date.now() - Date.parse(since)) / 1000, { decided_by: decidedBy });
}

/** Who got there first, for the one who did not. */
function lateVerdict(first: Offer): string {
  const by = first.resolution.by ? ` by ${first.resolution.by}` : '';
  return `already decided${by} (${first.via}: ${first.resolution.applied ? 'applied' : 'not applied'})`;
}

function describe(offer: Offer): Pick<ReconcileResolution, 'reason' | 'by' | 'decidedBy'> {
  const { reason, by } = offer.resolution;
  return by === undefined ? { reason, decidedBy: offer.via } : { reason, by, decidedBy: offer.via };
}

const REFUSALS = new Set<string>([
  SideEffectFailureType.InvalidAction,
  SideEffectFailureType.StaleVerdict,
]);

/** The store's refusal of a resolution (invalid, or for another episode), or undefined for any other failure. */
function refusal(error: unknown): ApplicationFailure | undefined {
  if (!(error instanceof ActivityFailure)) return undefined;
  const cause = error.cause;
  if (cause instanceof ApplicationFailure && cause.type && REFUSALS.has(cause.type)) return cause;
  return undefined;
}

async function probe(
  activityType: string,
  key: string,
  resource: string,
  input: unknown,
): Promise<ProbeAnswer | null> {
  const run =
    proxyActivities<
      Record<
        string,
        (request: { key: string; resource: string; input: unknown }) => Promise<ProbeAnswer | null>
      >
    >(probeOptions)[activityType]!;
  try {
    return await run({ key, resource, input });
  } catch (error) {
    log.warn('probe failed; waiting for a person instead', {
      key,
      activityType,
      error: error instanceof Error ? error.message : String(error),
    });
    return null;
  }
}

/** Signals every subscriber, including any that subscribes while this runs; a subscriber that is gone is skipped. */
async function notifySubscribers(
  key: string,
  resolution: ReconcileResolution,
  subscribers: Set<string>,
  runs: ReadonlyMap<string, string>,
): Promise<void> {
  const notified = new Set<string>();
  const reconciled = resolution.applied
    ? { key, applied: true, result: resolution.result }
    : { key, applied: false };
  for (;;) {
    const pending = [...subscribers].filter((id) => !notified.has(id));
    if (pending.length === 0) return;
    await Promise.all(
      pending.map(async (workflowId) => {
        notified.add(workflowId);
        try {
          const runId = runs.get(workflowId);
          await getExternalWorkflowHandle(workflowId).signal(
            reconciledSignal,
            runId === undefined ? reconciled : { ...reconciled, runId },
          );
        } catch (error) {
          log.warn('could not notify subscriber', {
            key,
            workflowId,
            error: error instanceof Error ? error.message : String(error),
          });
        }
      }),
    );
  }
}
