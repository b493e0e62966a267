import type { Client } from '@temporalio/client';
import {
  NativeConnection,
  Worker,
  type WorkerOptions,
  type WorkflowBundleOption,
} from '@temporalio/worker';
import type { SideEffectActivities } from '../activities/index.js';
import { maskError } from '../core/mask.js';
import { type ClusterOptions, clusterSettings } from './cluster.js';
import { SideEffectPlugin, type SideEffectPluginOptions } from './plugin.js';

export { type ClusterOptions, type ClusterSettings, clusterSettings } from './cluster.js';
export {
  defaultWorkflowsPath,
  encodedFailureConverterPath,
  SideEffectPlugin,
  type SideEffectPluginOptions,
} from './plugin.js';
export { missingSearchAttributes, searchAttributeCreateCommand } from './search-attributes.js';

/**
 * `createWorker`'s options: the plugin's options plus how to reach Temporal and which workflows to bundle.
 * @deprecated since 0.2.0, removed in 0.3.0: with {@link createWorker}, use `Worker.create` and
 * {@link SideEffectPluginOptions}.
 */
export interface CreateWorkerOptions extends SideEffectPluginOptions, Omit<ClusterOptions, 'env'> {
  taskQueue: string;
  /**
   * A connected NativeConnection for the worker (its namespace is still `namespace`).
   * @default one opened from Temporal's client configuration ({@link clusterSettings}), closed when `run()` ends
   */
  connection?: NativeConnection;
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
   * Your own activities, registered beside the side-effect activities (a name clash fails at start).
   * @default none
   */
  activities?: object;
  /**
   * Any other Worker option (concurrency, interceptors, identity, your own plugins...).
   * @default the SDK's defaults, except `shutdownGraceTime` = the longer of `ttlMs` and 5 minutes,
   * the effect activity's default timeout (a shutdown lets running applies finish), and the
   * heartbeat throttle = `ttlMs / 3` (a cancel reaches apply within about one TTL)
   */
  workerOptions?: Omit<
    WorkerOptions,
    'connection' | 'namespace' | 'taskQueue' | 'activities' | 'workflowsPath' | 'workflowBundle'
  >;
}

/**
 * A Worker with the side-effect activities and workflows registered, plus the sweeper tied to its run.
 * @deprecated since 0.2.0, removed in 0.3.0: with {@link createWorker}, use the `Worker` itself.
 */
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
 * A Worker with {@link SideEffectPlugin} on a connection read from Temporal's standard client
 * configuration, closed when `run()` ends; a connection error is masked
 * (`maskConnectionString`) before it is thrown.
 *
 * @deprecated since 0.2.0, removed in 0.3.0: use `Worker.create` with {@link SideEffectPlugin}.
 * This is a second way to build the same Worker; build it yourself and add the plugin, as
 * docs/getting-started.md does:
 * ```ts
 * const { connectionOptions, namespace } = clusterSettings();
 * const connection = await NativeConnection.connect(connectionOptions);
 * const plugins = [new SideEffectPlugin({ store, effects, ttlMs: 30_000 })];
 * const worker = await Worker.create({ connection, namespace, taskQueue, workflowsPath, plugins });
 * await worker.run(); // then connection.close() if the process goes on
 * ```
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
  let connection = given;
  const close = async () => {
    if (!given) await connection?.close().catch(() => {});
  };
  try {
    connection ??= await NativeConnection.connect(settings.connectionOptions);
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
    // The SDK echoes the address it was given, credentials included: keep them out of logs.
    throw maskError(error);
  }
}
