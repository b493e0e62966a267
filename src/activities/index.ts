import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { keepsBreakers } from '../core/breaker.js';
import { InvalidActionError, NotTransactionalError } from '../core/errors.js';
import { Runner } from '../core/runner.js';
import { isTransactionalStore, type Store, TRANSACTION_ISOLATIONS } from '../core/store.js';
import { checkTtl } from '../core/validate.js';
import { SideEffectFailureType } from '../protocol/failures.js';
import {
  legacyActivityNames,
  legacyProbeActivityName,
  libraryActivityNames,
  probeActivityName,
  type ReconcileInput,
} from '../protocol/wire.js';
import { attemptHistory } from './attempt-history.js';
import { type BreakerDefaults, BreakerGate } from './breaker-gate.js';
import { type AnyEffect, refuseTransactionalBreaker } from './effect.js';
import { effectActivity, probeActivity } from './effect-activity.js';
import { type ReconcileActivities, reconcileActivities } from './reconcile-activities.js';
import { SearchAttributeRegistration } from './search-attributes.js';

export type { BreakerOptions } from './breaker-gate.js';
export {
  type AnyEffect,
  defineEffect,
  type EffectContext,
  type SideEffectDefinition,
  type TransactionalEffectDefinition,
} from './effect.js';

type Activity = (...args: never[]) => Promise<unknown>;

/** What `createSideEffectActivities` needs: the store that judges, the effects it guards, and where ReconcileWorkflows run. */
export interface SideEffectActivitiesOptions {
  store: Store;
  /**
   * Each effect becomes an activity named after its key here (readable in the UI), and
   * `sideeffect.probe.<name>` if it has a probe. Names starting with `sideeffect.` or `probe:`
   * and the 0.1.0 activity names are reserved.
   */
  effects: Record<string, AnyEffect>;
  /**
   * How long one attempt may hold a resource; renewed (and Temporal heartbeated) every ttlMs/3
   * while apply runs. The effect activity's heartbeatTimeout must be at least ttlMs/2
   * (an effect call's default is 1 minute), else it fails with SideEffectMisconfigured.
   */
  ttlMs: number;
  /** Starts and joins ReconcileWorkflows. */
  client: Client;
  /** The task queue whose workers run ReconcileWorkflow (workflows and the reconcile activities). */
  taskQueue: string;
  /**
   * Reminder period of a waiting ReconcileWorkflow.
   * @default 3_600_000 (1 hour)
   */
  remindEveryMs?: number;
  /**
   * Keep SideEffectKey/SideEffectResource/SideEffectState on ReconcileWorkflows; needs them
   * registered as Keyword on the namespace. A function is asked at each start: the worker plugin
   * turns it off (memo-only) when its start-up check finds them missing. Unless it is `false`
   * (off for good), the namespace is asked too, at most every 10 s: a reconcile starts indexed
   * once all three are registered, and one started memo-only upserts those registered later at
   * its next reminder, `recheck` signal or continue-as-new.
   * @default true
   */
  searchAttributes?: boolean | (() => boolean);
  /**
   * Also register the 0.1.0 activity types (`ensureReconcile`, `inspectKey`, `resolveKey`,
   * `probe:<effect>`) that runs started by 0.1.0 still schedule. Turn it off once no such run is
   * open, or when one of your activities has one of those names.
   * @default true
   */
  legacyActivityNames?: boolean;
  /**
   * Lower bound of the retry delay after `contended`, so a lease about to expire is not hammered.
   * @default 100
   */
  minContendedDelayMs?: number;
  /**
   * At most this many uncertain keys get a ReconcileWorkflow per sweep, oldest first, so a
   * backlog is worked through.
   * @default 1000
   */
  sweepLimit?: number;
  /**
   * A key whose ReconcileWorkflow the sweeper started is started again (use-existing: a no-op
   * while it runs) only after this long, in case it was terminated.
   * @default 3_600_000 (1 hour)
   */
  restartReconcileAfterMs?: number;
  /**
   * Every effect's breaker default (thresholds, `effects: 'all'` to give every non-transactional
   * effect one) and how long a worker trusts a closed breaker. Effects opt in with `breaker`.
   * A store without breakers (a custom one) with an effect that has one is refused at start.
   * @default breakers only where an effect declares one: 5 uncertain within 60 s open it, 30 s cool-down (at most 10 min)
   */
  breaker?: BreakerDefaults;
}

/** The activities object to register on a Worker, keyed by activity type. */
export type SideEffectActivities = {
  [libraryActivityNames.sweepAndReconcile]: ReconcileActivities['sweepAndReconcile'];
} & Record<string, Activity>;

/** Whether an effect's name would shadow one of the library's activity types (current or 0.1.0). */
function isReserved(name: string): boolean {
  return (
    name.startsWith('sideeffect.') ||
    name.startsWith('probe:') ||
    Object.values(legacyActivityNames).includes(name as never) ||
    name === 'sweepAndReconcile'
  );
}

/**
 * Builds the Temporal activities that put the store's gate in front of each
 * effect: key `<workflowId>/<step>`, lease renewed and heartbeated while apply
 * runs, outcomes mapped to Temporal failures a retry policy handles right
 * (contended retries after the lease, uncertain never retries blindly).
 *
 * `SideEffectPlugin` (`sideeffect/worker`) calls it for you, and is the way to use it. This is the low-level
 * piece for a Worker that cannot take the plugin (say an SDK release changed the experimental
 * `WorkerPlugin` interface), or to call the activities directly. Registered by hand, you lose
 * everything else the plugin does, and each is yours to do (docs/architecture.md lists them):
 * the sweeper (run `sideeffect.sweepAndReconcile` periodically, or keys left uncertain by a dead
 * worker get no ReconcileWorkflow), the search-attribute check (pass `searchAttributes: () => false`
 * while they may be missing: memo only, each reconcile picks them up once they are registered),
 * the store schema check at start, the ReconcileWorkflow bundle
 * check, the activity-name clash check, and the shutdown grace time and heartbeat throttle that
 * keep a deploy from turning running applies uncertain.
 *
 * @example
 * ```ts
 * const activities = createSideEffectActivities({
 *   store: new PgStore(), effects, ttlMs: 30_000, client, taskQueue: 'payments',
 *   searchAttributes: () => false, // memo only until they are registered, then picked up
 * });
 * const throttle = 10_000; // ttlMs / 3: a cancel reaches apply within about one TTL
 * const worker = await Worker.create({
 *   connection, taskQueue: 'payments', activities, workflowsPath, // re-exports ReconcileWorkflow
 *   shutdownGraceTime: '5 minutes', // running applies finish on a deploy
 *   maxHeartbeatThrottleInterval: throttle, defaultHeartbeatThrottleInterval: throttle,
 * });
 * // No sweeper: call activities['sideeffect.sweepAndReconcile']() every minute, or from a Schedule.
 * ```
 */
export function createSideEffectActivities(
  options: SideEffectActivitiesOptions,
): SideEffectActivities {
  const { store, effects, client, taskQueue } = options;
  const ttlMs = checkTtl(options.ttlMs);
  const runner = new Runner(store, { ttlMs });
  const minContendedDelayMs = options.minContendedDelayMs ?? 100;
  const remindEveryMs = options.remindEveryMs;
  const searchAttributes = options.searchAttributes ?? true;
  const indexed =
    typeof searchAttributes === 'function' ? searchAttributes : () => searchAttributes;
  const legacy = options.legacyActivityNames ?? true;
  // `false` means memo only for good; otherwise registration may come while reconciles wait.
  const registration =
    searchAttributes === false ? undefined : new SearchAttributeRegistration(client);

  const reconcileInput = async (details: ReconcileInput): Promise<ReconcileInput> => ({
    ...details,
    // Read once per run started: what the page shows to tell this attempt from earlier ones.
    ...(details.fence === undefined
      ? {}
      : attemptHistory(await store.events(details.key), details.fence)),
    ...(remindEveryMs === undefined ? {} : { remindEveryMs }),
    searchAttributes: indexed() || ((await registration?.complete()) ?? false),
  });

  const breakerDefaults = options.breaker ?? {};
  const breakers = keepsBreakers(store)
    ? { gate: new BreakerGate(store, breakerDefaults.closedCacheMs), defaults: breakerDefaults }
    : undefined;
  const activities: Record<string, Activity> = {};
  for (const [name, effect] of Object.entries(effects)) {
    if (
      !breakers &&
      !effect.transactional &&
      (effect.breaker ? true : effect.breaker === undefined && breakerDefaults.effects === 'all')
    )
      throw new InvalidActionError(
        `effects.${name}.breaker`,
        'the store keeps no breakers (BreakerStore): use PgStore or MemoryStore, or drop the breaker',
      );
    refuseTransactionalBreaker(effect, `effects.${name}.breaker`);
    if (isReserved(name))
      throw new InvalidActionError('effects', `"${name}" is reserved for the library's activities`);
    if (effect.transactional && !isTransactionalStore(store))
      throw new NotTransactionalError(`the store of transactional effect "${name}"`);
    if (
      effect.transactional &&
      effect.isolation !== undefined &&
      !TRANSACTION_ISOLATIONS.includes(effect.isolation)
    )
      throw new InvalidActionError(
        `effects.${name}.isolation`,
        `must be one of ${TRANSACTION_ISOLATIONS.join(', ')}`,
      );
    activities[name] = effectActivity(name, effect, {
      runner,
      ttlMs,
      minContendedDelayMs,
      ...(breakers ? { breakers } : {}),
    });
    if (effect.probe) {
      const probe = probeActivity(effect, store);
      activities[probeActivityName(name)] = probe;
      if (legacy) activities[legacyProbeActivityName(name)] = probe;
    }
  }

  const reconcile = reconcileActivities({
    store,
    effects,
    client,
    taskQueue,
    reconcileInput,
    ...(registration === undefined ? {} : { registration }),
    ...(options.sweepLimit === undefined ? {} : { sweepLimit: options.sweepLimit }),
    ...(options.restartReconcileAfterMs === undefined
      ? {}
      : { restartAfterMs: options.restartReconcileAfterMs }),
  });
  for (const [method, name] of Object.entries(libraryActivityNames))
    activities[name] = reconcile[method as keyof ReconcileActivities];
  if (legacy) {
    for (const [method, name] of Object.entries(legacyActivityNames))
      activities[name] = reconcile[method as keyof ReconcileActivities];
    activities[legacyActivityNames.resolveKey] = refusedAsInvalid(reconcile.resolveKey);
  }
  return activities as SideEffectActivities;
}

/**
 * `resolveKey` under its 0.1.0 name: the runs that schedule it (0.1.0's, and those held to its
 * commands by `compatibleWith`) are replayed by 0.1.0's workflow code after a rollback, which
 * refuses a verdict only on `SideEffectInvalidAction` and fails the whole run on any other
 * failure. A verdict for another attempt (`SideEffectStaleVerdict`) is refused under that type
 * there, with the same message and details, so such a run refuses it as 0.1.0 would replay it.
 */
function refusedAsInvalid(resolveKey: ReconcileActivities['resolveKey']): Activity {
  return async (...args: Parameters<ReconcileActivities['resolveKey']>) => {
    try {
      return await resolveKey(...args);
    } catch (error) {
      if (
        !(error instanceof ApplicationFailure) ||
        error.type !== SideEffectFailureType.StaleVerdict
      )
        throw error;
      throw ApplicationFailure.create({
        type: SideEffectFailureType.InvalidAction,
        message: error.message,
        nonRetryable: true,
        details: error.details ? [...error.details] : [],
      });
    }
  };
}
