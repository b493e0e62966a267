import type { Client } from '@temporalio/client';
import {
  NativeConnection,
  Worker,
  type WorkerOptions,
  type WorkflowBundleOption,
} from '@temporalio/worker';
import type { SideEffectActivities } from '../activities/index.js';
import { type ClusterOptions, clusterSettings } from './cluster.js';
import { SideEffectPlugin, type SideEffectPluginOptions } from './plugin.js';

export { type ClusterOptions, type ClusterSettings, clusterSettings } from './cluster.js';
export { defaultWorkflowsPath, SideEffectPlugin, type SideEffectPluginOptions } from './plugin.js';
export {
  missingSearchAttributes,
  searchAttributeCreateCommand,
  searchAttributeNames,
} from './search-attributes.js';

/** `createWorker`'s options: the plugin's options plus how to reach Temporal and which workflows to bundle. */
export interface CreateWorkerOptions extends SideEffectPluginOptions, Omit<ClusterOptions, 'env'> {
  taskQueue: string;
  /**
   * A connected NativeConnection for the worker (its namespace is still `namespace`). Otherwise one is
   * opened from Temporal's client configuration (see {@link clusterSettings}) and closed when `run()` ends.
   */
  connection?: NativeConnection;
  /**
   * Your workflows module. It must re-export the library's workflows, because a
   * task queue runs one bundle:
   * `export { ReconcileWorkflow } from 'sideeffect/workflows';`.
   * Default: the library's own module (ReconcileWorkflow only).
   */
  workflowsPath?: string;
  /** A prebuilt bundle (`bundleWorkflowCode`) instead of `workflowsPath`; same re-export rule. */
  workflowBundle?: WorkflowBundleOption;
  /** Your own activities, registered beside the side-effect activities (a name clash fails at start). */
  activities?: object;
  /** Any other Worker option (concurrency, interceptors, identity, your own plugins...). */
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
  /** Runs the worker and the sweeper until `shutdown()` (or a fatal worker error); then closes the connection it opened. */
  run(): Promise<void>;
  /** Starts a graceful shutdown; `run()` resolves when it is done. */
  shutdown(): void;
}

/**
 * One call from effects to a running worker, for apps that have no Worker of
 * their own: a Worker with {@link SideEffectPlugin} on a connection read from
 * Temporal's standard client configuration, so no piece of the at-most-once
 * chain (activities, workflows, sweeper, search-attribute check) is left for
 * the host to forget.
 */
export async function createWorker(options: CreateWorkerOptions): Promise<SideEffectWorker> {
  const {
    connection: given,
    address,
    namespace: namespaceOption,
    profile,
    configFile,
    taskQueue,
    workflowsPath,
    workflowBundle,
    activities,
    workerOptions,
    ...pluginOptions
  } = options;
  const settings = clusterSettings({
    ...(address === undefined ? {} : { address }),
    ...(namespaceOption === undefined ? {} : { namespace: namespaceOption }),
    ...(profile === undefined ? {} : { profile }),
    ...(configFile === undefined ? {} : { configFile }),
  });
  const connection = given ?? (await NativeConnection.connect(settings.connectionOptions));
  const close = async () => {
    if (!given) await connection.close().catch(() => {});
  };
  try {
    const plugin = new SideEffectPlugin(pluginOptions);
    const worker = await Worker.create({
      ...workerOptions,
      plugins: [...(workerOptions?.plugins ?? []), plugin],
      connection,
      namespace: settings.namespace,
      taskQueue,
      ...(activities ? { activities } : {}),
      ...(workflowBundle ? { workflowBundle } : workflowsPath ? { workflowsPath } : {}),
    });
    return {
      worker,
      client: plugin.client,
      activities: plugin.activities,
      shutdown: () => worker.shutdown(),
      run: async () => {
        try {
          await worker.run();
        } finally {
          await close();
        }
      },
    };
  } catch (error) {
    await close();
    throw error;
  }
}
