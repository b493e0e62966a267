import type { Client } from '@temporalio/client';
import { InvalidActionError } from '../core/errors.js';
import { Runner } from '../core/runner.js';
import type { Store } from '../core/store.js';
import { checkTtl } from '../core/validate.js';
import { probeActivityName, type ReconcileInput } from '../workflows/protocol.js';
import type { AnyEffect } from './effect.js';
import { effectActivity, probeActivity } from './effect-activity.js';
import { type ReconcileActivities, reconcileActivities } from './reconcile-activities.js';

export {
  type AnyEffect,
  defineEffect,
  type EffectContext,
  type ProbeContext,
  type SideEffectDefinition,
} from './effect.js';
export type { ReconcileActivities, SweepAndReconcileReport } from './reconcile-activities.js';

/** What `createSideEffectActivities` needs: the store that judges, the effects it guards, and where ReconcileWorkflows run. */
export interface SideEffectActivitiesOptions {
  store: Store;
  /** Each effect becomes an activity named after its key here (readable in the UI), and `probe:<name>` if it has a probe. */
  effects: Record<string, AnyEffect>;
  /**
   * How long one attempt may hold a resource; renewed (and Temporal heartbeated) every ttlMs/3
   * while apply runs. The effect activity's heartbeatTimeout must be at least ttlMs/2
   * (sideEffect's default is 1 minute), else it fails with SideEffectMisconfigured.
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
   * registered as Keyword on the namespace.
   * @default true
   */
  searchAttributes?: boolean;
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
   * while it runs) only after this long, in case it was terminated. Default 1 hour.
   */
  restartReconcileAfterMs?: number;
}

/** The activities object to register on a Worker. */
export type SideEffectActivities = ReconcileActivities &
  Record<string, (...args: never[]) => Promise<unknown>>;

const RESERVED = new Set(['ensureReconcile', 'inspectKey', 'resolveKey', 'sweepAndReconcile']);

/**
 * Builds the Temporal activities that put the store's gate in front of each
 * effect: key `<workflowId>/<step>`, lease renewed and heartbeated while apply
 * runs, outcomes mapped to Temporal failures a retry policy handles right
 * (contended retries after the lease, uncertain never retries blindly).
 * `createWorker` calls it for you; use it to register them on a Worker you build.
 *
 * @example
 * ```ts
 * const activities = createSideEffectActivities({
 *   store: new PgStore({ pool }), effects, ttlMs: 30_000, client, taskQueue: 'payments',
 * });
 * await Worker.create({ taskQueue: 'payments', activities, workflowsPath });
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

  const reconcileInput = (details: ReconcileInput): ReconcileInput => ({
    ...details,
    ...(remindEveryMs === undefined ? {} : { remindEveryMs }),
    searchAttributes,
  });

  const activities: Record<string, (...args: never[]) => Promise<unknown>> = {};
  for (const [name, effect] of Object.entries(effects)) {
    if (RESERVED.has(name) || name.startsWith('probe:'))
      throw new InvalidActionError('effects', `"${name}" is reserved for the reconcile activities`);
    activities[name] = effectActivity(name, effect, { runner, ttlMs, minContendedDelayMs });
    if (effect.probe) activities[probeActivityName(name)] = probeActivity(effect, store);
  }

  const reconcile = reconcileActivities({
    store,
    effects,
    client,
    taskQueue,
    reconcileInput,
    ...(options.sweepLimit === undefined ? {} : { sweepLimit: options.sweepLimit }),
    ...(options.restartReconcileAfterMs === undefined
      ? {}
      : { restartAfterMs: options.restartReconcileAfterMs }),
  });
  return Object.assign(activities, reconcile);
}
