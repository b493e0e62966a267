import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import {
  NativeConnection,
  Worker,
  type WorkerOptions,
  type WorkflowBundleOption,
} from '@temporalio/worker';
import {
  createSideEffectActivities,
  type SideEffectActivities,
  type SideEffectActivitiesOptions,
} from '../activities/index.js';
import { maskError } from '../core/mask.js';
import { lifecycleDefaults } from './lifecycle.js';
import { Sweeper } from './sweeper.js';

/** The library's own workflows module (ReconcileWorkflow), as source under tsx or compiled in dist. */
export const defaultWorkflowsPath: string = (() => {
  const source = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));
  return existsSync(source)
    ? source
    : fileURLToPath(new URL('../workflows/index.js', import.meta.url));
})();

/** `createWorker`'s options: the activities' options plus how to reach Temporal and which workflows to bundle. */
export interface CreateWorkerOptions extends Omit<SideEffectActivitiesOptions, 'client'> {
  /**
   * A connected NativeConnection for the worker.
   * @default one to `address`, opened here and closed when `run()` ends
   */
  connection?: NativeConnection;
  /**
   * Where Temporal's frontend is when no connection/client is given.
   * @default 'localhost:7233'
   */
  address?: string;
  /**
   * The Temporal namespace of the worker and of the ReconcileWorkflows it starts.
   * @default 'default'
   */
  namespace?: string;
  /**
   * Starts ReconcileWorkflows.
   * @default one on its own Connection to `address`, closed when `run()` ends
   */
  client?: Client;
  /**
   * Your workflows module. It must re-export the library's workflows, because a
   * task queue runs one bundle:
   * `export { ReconcileWorkflow } from 'sideeffect/workflows';`.
   * @default the library's own module (ReconcileWorkflow only)
   */
  workflowsPath?: string;
  /**
   * A prebuilt bundle (`bundleWorkflowCode`) instead of `workflowsPath`; same re-export rule.
   * @default none: `workflowsPath` is bundled at start
   */
  workflowBundle?: WorkflowBundleOption;
  /**
   * Your own activities, registered beside the side-effect activities.
   * @default none
   */
  activities?: object;
  /**
   * About every this many ms (±20 % jitter): `store.sweep()` and a ReconcileWorkflow for
   * every uncertain key without one (a worker died mid-apply and nobody retried). Only the
   * worker leading the store sweeps (a Postgres advisory lock). 0 turns it off (run
   * `sweepAndReconcile` elsewhere then).
   * @default 60_000
   */
  sweepEveryMs?: number;
  /**
   * Any other Worker option (concurrency, interceptors, identity...).
   * @default the SDK's defaults, except `shutdownGraceTime` = `ttlMs` (a shutdown lets running
   * applies finish) and the heartbeat throttle = `ttlMs / 3` (a cancel reaches apply within
   * about one TTL)
   */
  workerOptions?: Omit<
    WorkerOptions,
    'connection' | 'namespace' | 'taskQueue' | 'activities' | 'workflowsPath' | 'workflowBundle'
  >;
}

/** A Worker with the side-effect activities and workflows registered, plus the sweeper tied to its run. */
export interface SideEffectWorker {
  worker: Worker;
  client: Client;
  activities: SideEffectActivities;
  /** Runs the worker and the sweeper until `shutdown()` (or a fatal worker error); then closes the connections it opened. */
  run(): Promise<void>;
  /** Starts a graceful shutdown; `run()` resolves when it is done. */
  shutdown(): void;
}

/**
 * One call from effects to a running worker: registers the guarded effect
 * activities, the reconcile activities and the workflows on a task queue, and
 * runs the sweeper beside it, so no piece of the at-most-once chain is left
 * for the host to forget.
 *
 * @example
 * ```ts
 * await migrate(pool, { schema: 'sideeffect' });
 * const { run } = await createWorker({
 *   taskQueue: 'payments',
 *   store: new PgStore({ pool, schema: 'sideeffect' }),
 *   effects, // { charge: defineEffect({ resource, apply, probe }) }
 *   ttlMs: 30_000,
 *   workflowsPath: fileURLToPath(new URL('./workflows.js', import.meta.url)),
 * });
 * await run();
 * ```
 */
export async function createWorker(options: CreateWorkerOptions): Promise<SideEffectWorker> {
  const {
    connection,
    address = 'localhost:7233',
    namespace = 'default',
    taskQueue,
    workflowsPath,
    workflowBundle,
    activities: own,
    sweepEveryMs = 60_000,
    workerOptions,
    client: givenClient,
    ...activityOptions
  } = options;
  const opened: Array<{ close(): Promise<void> }> = [];
  try {
    let client = givenClient;
    if (!client) {
      const clientConnection = await Connection.connect({ address });
      opened.push(clientConnection);
      client = new Client({ connection: clientConnection, namespace });
    }
    let nativeConnection = connection;
    if (!nativeConnection) {
      nativeConnection = await NativeConnection.connect({ address });
      opened.push(nativeConnection);
    }
    const activities = createSideEffectActivities({ ...activityOptions, client, taskQueue });
    const worker = await Worker.create({
      ...lifecycleDefaults(activityOptions.ttlMs),
      ...workerOptions,
      connection: nativeConnection,
      namespace,
      taskQueue,
      activities: { ...own, ...activities },
      ...(workflowBundle
        ? { workflowBundle }
        : { workflowsPath: workflowsPath ?? defaultWorkflowsPath }),
    });
    return {
      worker,
      client,
      activities,
      shutdown: () => worker.shutdown(),
      run: async () => {
        const sweeper =
          sweepEveryMs > 0
            ? new Sweeper(activityOptions.store, activities, sweepEveryMs)
            : undefined;
        try {
          await worker.run();
        } finally {
          await sweeper?.stop();
          await closeAll(opened);
        }
      },
    };
  } catch (error) {
    await closeAll(opened);
    // The SDK echoes the address it was given, credentials included: keep them out of logs.
    throw maskError(error);
  }
}

async function closeAll(opened: Array<{ close(): Promise<void> }>): Promise<void> {
  await Promise.all(opened.map((connection) => connection.close().catch(() => {})));
}
