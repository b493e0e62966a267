import {
  getExternalWorkflowHandle,
  log,
  metricMeter,
  proxyActivities,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import {
  type DecidedByLabel,
  RECONCILES_RESOLVED_METRIC,
  type RefusalLabel,
  TIME_TO_RESOLUTION_METRIC,
  VERDICTS_REFUSED_METRIC,
} from '../protocol/metrics.js';
import {
  libraryActivityNames,
  type ProbeAnswer,
  type ReconcileResolution,
  reconciledSignal,
  searchAttributeKeys,
} from '../protocol/wire.js';
import { takePatch } from './patch.js';

/** A few tries, then the next reminder asks again: an old worker mid-deploy lacks this activity. */
const registeredSearchAttributes = proxyActivities<Record<string, () => Promise<string[]>>>({
  startToCloseTimeout: '30 seconds',
  retry: { maximumAttempts: 3, initialInterval: '1 second' },
})[libraryActivityNames.registeredSearchAttributes]!;

/** Retries a flaky downstream a few times, then leaves the decision to a person rather than looping forever. */
const probeOptions = {
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 5, initialInterval: '1 second', backoffCoefficient: 2 },
} as const;

/**
 * Upserts the search attributes this run lacks that the namespace has registered by now (asked
 * through the worker: upserting an unregistered one would fail the workflow task in a loop).
 * Asks nothing once all are set, so an indexed run never gets here past its first check.
 */
export async function upsertLateSearchAttributes(key: string, resource: string): Promise<void> {
  const values = { key, resource, state: 'waiting' };
  const unset = (Object.keys(searchAttributeKeys) as Array<keyof typeof values>).filter(
    (field) => !carries(searchAttributeKeys[field]),
  );
  if (unset.length === 0 || !takePatch('reconcileLateSearchAttributes')) return;
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
export function carries(
  attribute: (typeof searchAttributeKeys)[keyof typeof searchAttributeKeys],
): boolean {
  const info = workflowInfo();
  if (info.typedSearchAttributes.get(attribute) !== undefined) return true;
  // A payload without type metadata shows only in the untyped map.
  return (info.searchAttributes?.[attribute.name]?.length ?? 0) > 0;
}

/** Metrics only (no commands): safe to emit on any code path, dropped by the SDK during replay. */
export function recordResolution(decidedBy: DecidedByLabel, applied: boolean, since: string): void {
  metricMeter
    .createCounter(
      RECONCILES_RESOLVED_METRIC,
      'reconciles',
      'reconciles closed, by which way the verdict came',
    )
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

/** Metrics only: a verdict this run refused (see {@link VERDICTS_REFUSED_METRIC}). */
export function recordRefusal(refusal: RefusalLabel, via: 'signal' | 'update' | 'probe'): void {
  metricMeter
    .createCounter(VERDICTS_REFUSED_METRIC, 'verdicts', 'verdicts a reconcile refused')
    .add(1, { refusal, via });
}

/** The effect's probe's answer; a probe that fails leaves the decision to a person (null). */
export async function probe(
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
export async function notifySubscribers(
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
