import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Client } from '@temporalio/client';
import {
  type BundleOptions,
  type ReplayWorkerOptions,
  Runtime,
  type Worker,
  type WorkerOptions,
  type WorkerPlugin,
} from '@temporalio/worker';
import {
  createSideEffectActivities,
  type SideEffectActivities,
  type SideEffectActivitiesOptions,
} from '../activities/index.js';
import {
  ActivityNameClashError,
  DurabilityAtRiskError,
  InvalidActionError,
  type MigrationConflictError,
  SearchAttributesMissingError,
  StoreIsStandbyError,
  StoreMisconfiguredError,
} from '../core/errors.js';
import type { Store } from '../core/store.js';
import type { CompatibleWith } from '../protocol/patches.js';
import { checkedDurability, type Durability } from '../store/postgres/durability.js';
import { newerSchema } from '../store/postgres/newer-schema.js';
import {
  bundleCompatibilityError,
  bundleOptionsCompatibleWith,
  checkedCompatibleWith,
  defineCompatibleWith,
} from './compatibility.js';
import { DurabilityWatch, isReplicated } from './durability-watch.js';
import { signalDecidedReconciles } from './held-reconciles.js';
import { lifecycleDefaults } from './lifecycle.js';
import { bundlerIsolationError } from './sdk-check.js';
import { missingSearchAttributes, searchAttributeCreateCommand } from './search-attributes.js';
import { Sweeper } from './sweeper.js';
import {
  bundleRunsReconcile,
  missingReconcileWorkflow,
  requireReconcileExport,
} from './workflows-check.js';

/** The library's own workflows module (ReconcileWorkflow), as source under tsx or compiled in dist. */
export const defaultWorkflowsPath: string = (() => {
  const source = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));
  return existsSync(source)
    ? source
    : fileURLToPath(new URL('../workflows/index.js', import.meta.url));
})();

/**
 * The module of the failure converter that encodes failure messages and stack traces, as source
 * or compiled: pass it as `failureConverterPath` to a `bundleWorkflowCode` whose bundle runs
 * under a payload codec. The plugin gives it to a Worker that bundles its workflows itself; a
 * bundle built ahead of time without it writes failure texts (an apply error quoting a card
 * number) into the history in plain text, and Worker.create warns.
 */
export const encodedFailureConverterPath: string = (() => {
  const source = fileURLToPath(new URL('./encoded-failures.ts', import.meta.url));
  return existsSync(source)
    ? source
    : fileURLToPath(new URL('./encoded-failures.js', import.meta.url));
})();

/** What {@link SideEffectPlugin} needs: the activities' options, minus what it takes from the Worker. */
export interface SideEffectPluginOptions
  extends Omit<SideEffectActivitiesOptions, 'client' | 'taskQueue' | 'searchAttributes'> {
  /**
   * Your app's Client: ReconcileWorkflows are started through it, so with its
   * interceptors (OpenTelemetry...) and data converter. Refused when the Worker has payload
   * codecs and this Client has none: the library's starts and signals would be stored unencoded.
   * @default a Client on the Worker's connection, namespace and data converter
   */
  client?: Client;
  /**
   * Where ReconcileWorkflows run.
   * @default the Worker's task queue
   */
  taskQueue?: string;
  /**
   * About every this many ms (±20 % jitter): `store.sweep()` and a ReconcileWorkflow for
   * every uncertain key without one (a worker died mid-apply and nobody retried). Only the
   * worker leading the store sweeps (a Postgres advisory lock). 0 turns it off (run the
   * `sideeffect.sweepAndReconcile` activity elsewhere then).
   * @default 60_000
   */
  sweepEveryMs?: number;
  /**
   * The SideEffectKey/SideEffectResource/SideEffectState search attributes.
   * `true`: checked at worker start; if the namespace lacks them, one warning
   * names the `temporal operator search-attribute create` command and
   * ReconcileWorkflows keep their details in the memo only (nothing hangs).
   * `'require'`: a missing attribute fails the worker's run with
   * SearchAttributesMissingError. `false`: memo only, nothing checked.
   * @default true
   */
  searchAttributes?: boolean | 'require';
  /**
   * Keeps what this worker's workflows do replayable by the given previous minor version: no
   * workflow patch that version does not know is taken, in ReconcileWorkflow and in the effect
   * calls of your workflows (the setting is built into the workflow bundle). Set it while you roll
   * this version out (say `'0.3'` when upgrading from 0.3.x), so you can roll back; remove it once
   * no worker of the older version will run again. Runs that already took a patch keep it. An
   * unknown version is refused (INVALID_ACTION). See docs/versioning.md, "Rolling back".
   * @default none: every patch of this version is taken
   */
  compatibleWith?: CompatibleWith;
  /**
   * What the worker's start requires of the store's replication (a PgStore's; other stores are
   * not checked). At-most-once is only as durable as the store's last acknowledged commit: a
   * failover to an asynchronous standby, or a crash with `synchronous_commit = off`, loses it,
   * and the effect it recorded is applied a second time.
   * - `'checked'`: the run fails with DurabilityAtRiskError when the server has asynchronous
   *   standbys (or an idle replication slot) and no `synchronous_standby_names`, or the store's
   *   role commits with `synchronous_commit` `off`, or `local` beside a synchronous standby. A
   *   single primary with no standby starts.
   * - `'managed'`: the service replicates below Postgres (RDS Multi-AZ DB instance, Aurora, Cloud
   *   SQL HA), where the server cannot tell: only `synchronous_commit = off` is refused.
   * - `'accept-loss'`: starts anyway, each risk logged as a warning.
   *
   * A standby (read-only) fails the run with StoreIsStandbyError under every setting. A bad value
   * is refused (INVALID_ACTION). See docs/production.md, "Durability and replication".
   * @default 'checked'
   */
  durability?: Durability;
}

interface Setup {
  activities: SideEffectActivities;
  client: Client;
  namespace: string;
  /** Where ReconcileWorkflows run. */
  taskQueue: string;
  /** Why the Worker's prebuilt bundle cannot run ReconcileWorkflow, once the check answered. */
  workflows: Promise<Error | undefined>;
}

/**
 * Adds the side-effect activities, the sweeper and (when the Worker names no
 * workflows of its own) the library's workflows to your own
 * `Worker.create({ plugins: [new SideEffectPlugin(...)] })`, so the library
 * shares your worker, connection, client and interceptors instead of needing a
 * second worker, and a name clash with your activities fails at start instead
 * of silently replacing one of them.
 *
 * Your own `workflowsPath` must re-export the library's workflows
 * (`export { ReconcileWorkflow } from 'sideeffect/workflows'`), because a task
 * queue runs one bundle; `Worker.create` fails when it does not (with a prebuilt
 * `workflowBundle`, `worker.run()` does, before the sweeper starts), and when the
 * plugin's `client` is on another namespace than the Worker. Use one plugin
 * instance per Worker.
 *
 * The way in on the worker side. Built on the SDK's `WorkerPlugin` interface, which the SDK
 * marks experimental: a minor SDK release may change it, so keep the SDK within the versions
 * this library is tested with (package.json's peer range; the peer dependency table of
 * docs/production.md). Should an SDK release break it, `createSideEffectActivities` registers
 * the effects without it (and without what it adds). `Worker.create` fails with
 * UnsupportedSdkError on an SDK whose workflow bundler lacks the fix for webpack >= 5.108 (a
 * second waiting workflow would never wake), naming the release to upgrade to.
 *
 * @example
 * ```ts
 * const { connectionOptions, namespace } = clusterSettings();
 * const connection = await NativeConnection.connect(connectionOptions);
 * const plugins = [new SideEffectPlugin({ store: new PgStore(), effects, ttlMs: 30_000 })];
 * const worker = await Worker.create({ connection, namespace, taskQueue: 'shop', workflowsPath, plugins });
 * await worker.run();
 * ```
 */
export class SideEffectPlugin implements WorkerPlugin {
  readonly name = 'sideeffect';
  readonly #options: SideEffectPluginOptions;
  /** Off until the start-up check confirms the attributes: a reconcile started meanwhile is memo-only, never stuck. */
  #indexed = false;
  #setup: Setup | undefined;
  /** The start-up schema check of the running Worker: its error, or undefined when the schema is ready. */
  #schemaChecked: Promise<Error | undefined> | undefined;

  constructor(options: SideEffectPluginOptions) {
    checkedCompatibleWith(options.compatibleWith);
    checkedDurability(options.durability);
    this.#options = options;
  }

  /** The activities registered on the last configured Worker (`sideeffect.sweepAndReconcile` among them). */
  get activities(): SideEffectActivities {
    return this.#configured().activities;
  }

  /** The Client that starts ReconcileWorkflows: yours, or one on the Worker's connection. */
  get client(): Client {
    return this.#configured().client;
  }

  // Synchronous: SDKs before 1.18 do not await this hook.
  configureWorker(options: WorkerOptions): WorkerOptions {
    const {
      client: given,
      taskQueue,
      sweepEveryMs: _,
      searchAttributes: __,
      compatibleWith,
      durability: ___,
      ...activityOptions
    } = this.#options;
    if (options.workerDeploymentOptions && !options.workerDeploymentOptions.useWorkerVersioning)
      throw new InvalidActionError(
        'workerDeploymentOptions',
        'ReconcileWorkflow declares AUTO_UPGRADE on a worker in a deployment (so a months-long wait survives deploys), and the server refuses a versioning behavior from a worker with useWorkerVersioning: false, failing every task: set useWorkerVersioning: true, or leave workerDeploymentOptions out',
      );
    const namespace = options.namespace ?? 'default';
    if (given && given.options.namespace !== namespace)
      throw new InvalidActionError(
        'client',
        `SideEffectPlugin's client is on namespace "${given.options.namespace}" but the Worker polls "${namespace}": ReconcileWorkflows would start where no worker runs them; give the plugin a Client on "${namespace}", or leave \`client\` out`,
      );
    let client = given;
    if (!client) {
      if (!options.connection)
        throw new InvalidActionError(
          'client',
          'SideEffectPlugin needs a Client, or a Worker created with a connection to build one on',
        );
      client = new Client({
        connection: options.connection,
        namespace,
        ...(options.dataConverter ? { dataConverter: options.dataConverter } : {}),
      });
    } else if (
      (options.dataConverter?.payloadCodecs?.length ?? 0) > 0 &&
      client.options.loadedDataConverter.payloadCodecs.length === 0
    )
      throw new InvalidActionError(
        'client',
        "the Worker encodes payloads with codecs but SideEffectPlugin's client has none, so ReconcileWorkflow inputs and signals would be stored unencoded: give that Client the Worker's dataConverter, or leave `client` out",
      );
    const unisolated = bundlerIsolationError(options);
    if (unisolated) throw unisolated;
    const wrongBundle =
      options.workflowBundle && bundleCompatibilityError(options.workflowBundle, compatibleWith);
    if (wrongBundle) throw wrongBundle;
    warnPlainFailures(options);
    const activities = createSideEffectActivities({
      ...activityOptions,
      client,
      taskQueue: taskQueue ?? options.taskQueue,
      // `false` keeps them off for good; otherwise a reconcile may pick them up once registered.
      searchAttributes: this.#options.searchAttributes === false ? false : () => this.#indexed,
    });
    const own: object = options.activities ?? {};
    const clash = Object.keys(activities).filter((name) => Object.hasOwn(own, name));
    if (clash.length > 0) throw new ActivityNameClashError(clash);
    this.#setup = {
      activities,
      client,
      namespace,
      taskQueue: taskQueue ?? options.taskQueue,
      workflows: bundleChecked(options),
    };
    return {
      ...lifecycleDefaults(this.#options.ttlMs),
      ...definedOnly(options),
      ...encodedFailures(options),
      activities: { ...own, ...this.#afterSchemaCheck(activities) },
      ...workflowOptions(options, compatibleWith),
    };
  }

  /**
   * Builds the setting of `compatibleWith` into a bundle made ahead of time:
   * `bundleWorkflowCode({ workflowsPath, plugins: [plugin] })`. The Worker refuses a prebuilt
   * bundle built with another setting.
   */
  configureBundler(options: BundleOptions): BundleOptions {
    return bundleOptionsCompatibleWith(options, this.#options.compatibleWith);
  }

  configureReplayWorker(options: ReplayWorkerOptions): ReplayWorkerOptions {
    return options.workflowsPath || options.workflowBundle
      ? options
      : { ...options, workflowsPath: defaultWorkflowsPath };
  }

  async runWorker(worker: Worker, next: (worker: Worker) => Promise<void>): Promise<void> {
    const setup = this.#configured();
    const wrongBundle = await setup.workflows;
    // Checked while the Worker starts (a check before it would leave a `runUntil` whose callback
    // ends first with a Worker nobody stops); the activities wait for the verdict.
    const schema = checkStore(this.#options.store, checkedDurability(this.#options.durability));
    this.#schemaChecked = schema;
    const running = next(worker);
    // Awaited below; until then a fatal worker error must not count as an unhandled rejection.
    running.catch(() => {});
    const unready = await schema;
    if (unready) {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => {});
      throw unready;
    }
    const refused = wrongBundle ?? (await this.#checkSearchAttributes(setup));
    if (refused) {
      worker.shutdown();
      await running.catch(() => {});
      throw refused;
    }
    const everyMs = this.#options.sweepEveryMs ?? 60_000;
    const store = this.#options.store;
    const watch = isReplicated(store)
      ? new DurabilityWatch(store, checkedDurability(this.#options.durability))
      : undefined;
    const sweeper =
      everyMs > 0
        ? new Sweeper(this.#options.store, setup.activities, everyMs, async () => {
            await watch?.check();
            // Held reconciles cannot read the store themselves; see signalDecidedReconciles.
            if (this.#options.compatibleWith)
              await signalDecidedReconciles(setup.client, this.#options.store, setup.taskQueue);
          })
        : undefined;
    try {
      await running;
    } finally {
      await sweeper?.stop();
    }
  }

  /** Sets memo-only or indexed mode; returns the error to fail the run with when attributes are required. */
  async #checkSearchAttributes(setup: Setup): Promise<Error | undefined> {
    const mode = this.#options.searchAttributes ?? true;
    if (mode === false) return undefined;
    const logger = Runtime.instance().logger;
    let missing: string[];
    try {
      missing = await missingSearchAttributes(setup.client, setup.namespace);
    } catch (error) {
      if (mode === 'require') return error instanceof Error ? error : new Error(String(error));
      logger.warn(
        'sideeffect: could not list the search attributes; ReconcileWorkflows keep their details in the memo only',
        {
          namespace: setup.namespace,
          error: error instanceof Error ? error.message : String(error),
        },
      );
      return undefined;
    }
    if (missing.length === 0) {
      this.#indexed = true;
      return undefined;
    }
    const command = searchAttributeCreateCommand(setup.namespace, missing);
    if (mode === 'require')
      return new SearchAttributesMissingError(setup.namespace, missing, command);
    logger.warn(
      `sideeffect: namespace "${setup.namespace}" lacks the search attribute(s) ${missing.join(', ')}; ` +
        `ReconcileWorkflows keep their details in the memo only until you run: ${command}`,
      { namespace: setup.namespace, missing, command },
    );
    return undefined;
  }

  /**
   * The activities as registered: each first waits for the start-up schema check, so no task this
   * Worker polls meanwhile runs against a schema it is about to refuse; a refused one fails
   * retryable, for a Worker that is configured right.
   */
  #afterSchemaCheck(activities: SideEffectActivities): Record<string, unknown> {
    return Object.fromEntries(
      Object.entries(activities).map(([name, activity]) => [
        name,
        async (...args: unknown[]) => {
          const unready = await this.#schemaChecked;
          if (unready) throw new Error(`this worker is stopping: ${unready.message}`);
          return (activity as (...input: unknown[]) => unknown)(...args);
        },
      ]),
    );
  }

  #configured(): Setup {
    if (!this.#setup)
      throw new InvalidActionError('plugin', 'SideEffectPlugin is not registered on a Worker yet');
    return this.#setup;
  }
}

/**
 * The workflow options that make sure ReconcileWorkflow runs on this Worker: the host's module is
 * checked while webpack bundles it (Worker.create fails), else the library's own module runs;
 * either bundle gets the `compatibleWith` setting.
 */
function workflowOptions(
  options: WorkerOptions,
  compatibleWith: CompatibleWith | undefined,
): Partial<WorkerOptions> {
  if (options.workflowBundle) return {};
  if (options.workflowsPath)
    return {
      bundlerOptions: defineCompatibleWith(
        requireReconcileExport(options.bundlerOptions, options.workflowsPath),
        compatibleWith,
      ),
    };
  const bundlerOptions = defineCompatibleWith(options.bundlerOptions, compatibleWith);
  return { workflowsPath: defaultWorkflowsPath, ...(bundlerOptions ? { bundlerOptions } : {}) };
}

/**
 * With payload codecs and no failure converter of the host's, failures are encoded too: Temporal
 * otherwise stores every failure's message and stack trace as plain text beside the encrypted
 * payloads, and an apply error's message is the downstream's own words about the input.
 */
function encodedFailures(options: WorkerOptions): Partial<WorkerOptions> {
  const converter = options.dataConverter;
  if ((converter?.payloadCodecs?.length ?? 0) === 0 || converter?.failureConverterPath) return {};
  return { dataConverter: { ...converter, failureConverterPath: encodedFailureConverterPath } };
}

/**
 * A bundle built ahead of time without the encoding failure converter, run under a payload codec,
 * writes what its workflow code fails with (an effect's error, a refused verdict) into the
 * history as plain text beside the encrypted payloads, with nothing said: warned here, at
 * Worker.create. Found by the converter's module in the bundle, which webpack names by its path.
 */
function warnPlainFailures(options: WorkerOptions): void {
  const bundle = options.workflowBundle;
  if (!bundle || (options.dataConverter?.payloadCodecs?.length ?? 0) === 0) return;
  const code = 'code' in bundle ? bundle.code : readFileSync(bundle.codePath, 'utf8');
  if (code.includes(ENCODED_FAILURES_MODULE)) return;
  Runtime.instance().logger.warn(
    "sideeffect: the Worker's workflowBundle was built without the failure converter that encodes failure texts, but the Worker encodes payloads with codecs: failures raised in workflow code (an effect's error, a refused verdict) reach the history in plain text. Build the bundle with `bundleWorkflowCode({ workflowsPath, failureConverterPath: encodedFailureConverterPath, plugins: [plugin] })` (`encodedFailureConverterPath` from 'sideeffect/worker'), or let the Worker bundle workflowsPath",
    { sdkComponent: 'worker' },
  );
}

/** The name webpack gives the encoding failure converter's module in a bundle that carries it. */
const ENCODED_FAILURES_MODULE = 'encoded-failures.';

/**
 * A prebuilt bundle is checked by replaying one ReconcileWorkflow start, started here and
 * awaited when the Worker runs, which then stops at once instead of failing a task in a loop.
 */
async function bundleChecked(options: WorkerOptions): Promise<Error | undefined> {
  if (!options.workflowBundle) return undefined;
  return (await bundleRunsReconcile(options.workflowBundle))
    ? undefined
    : missingReconcileWorkflow("the Worker's workflowBundle");
}

/** The options the host set, so an option left `undefined` does not hide a default under it. */
function definedOnly(options: WorkerOptions): WorkerOptions {
  return Object.fromEntries(
    Object.entries(options).filter(([, value]) => value !== undefined),
  ) as WorkerOptions;
}

/** The start-up checks of the store: its replication first (a standby's schema reads fine), then its schema. */
async function checkStore(store: Store, durability: Durability): Promise<Error | undefined> {
  return (await checkReplication(store, durability)) ?? (await checkSchema(store));
}

/**
 * Refuses to run a worker on a standby, or, unless `durability` declares the setup, on a server
 * whose failover or crash can lose an acknowledged commit: the store would forget an applied
 * effect, and the next call would apply it again. With `'accept-loss'` each risk is logged. A
 * server that cannot be read only warns, as the schema check does: the activities retry until it
 * answers.
 */
async function checkReplication(
  store: Store,
  durability: Durability,
): Promise<StoreIsStandbyError | DurabilityAtRiskError | undefined> {
  if (!isReplicated(store)) return undefined;
  const logger = Runtime.instance().logger;
  try {
    const report = await store.checkDurability(durability);
    for (const risk of report.risks)
      logger.warn(
        `sideeffect: durability 'accept-loss', starting anyway: ${risk.problem} (fix: ${risk.fix})`,
        { host: report.facts.host, kind: risk.kind },
      );
    return undefined;
  } catch (error) {
    if (error instanceof StoreIsStandbyError || error instanceof DurabilityAtRiskError)
      return error;
    logger.warn("sideeffect: could not read the store's replication at start", {
      error: error instanceof Error ? error.message : String(error),
    });
    return undefined;
  }
}

/** What a store that keeps its schema in Postgres tells about it (`PgStore.migrationStatus`). */
interface MigratedStore {
  migrationStatus(): Promise<{
    schema: string;
    applied: unknown[];
    pending: string[];
    unknown: string[];
    unknownCompatible: boolean;
  }>;
}

/**
 * Refuses to run a worker whose store schema misses migrations (never migrated, the wrong schema
 * or database, or the package upgraded without `migrate`): otherwise every effect would retry
 * "relation does not exist" for ever. A schema a newer version migrated only warns when each of
 * its new migrations declared itself backward-compatible (a rollback must still start), and is
 * refused otherwise, as `migrate()` refuses it. So is a database that refuses the worker's user,
 * password, database name or privileges (naming host, database and user). An unreachable
 * database only warns: the activities retry until it answers.
 */
async function checkSchema(
  store: Store,
): Promise<StoreMisconfiguredError | MigrationConflictError | undefined> {
  const status = (store as Partial<MigratedStore>).migrationStatus;
  if (typeof status !== 'function') return undefined;
  const logger = Runtime.instance().logger;
  let read: Awaited<ReturnType<MigratedStore['migrationStatus']>>;
  try {
    read = await status.call(store);
  } catch (error) {
    // Postgres refused the user, password, database or a privilege: no retry will fix that.
    if (error instanceof StoreMisconfiguredError) return error;
    logger.warn("sideeffect: could not read the store schema's migrations at start", {
      error: error instanceof Error ? error.message : String(error),
    });
    return undefined;
  }
  const { schema, applied, pending, unknown } = read;
  const newer = newerSchema(read);
  if (newer && 'refused' in newer) return newer.refused;
  if (pending.length > 0) {
    const problem =
      applied.length === 0
        ? `store schema "${schema}" has no sideeffect tables (nothing migrated there)`
        : `store schema "${schema}" lacks migration(s) ${pending.join(', ')} that this version of sideeffect needs`;
    return new StoreMisconfiguredError(schema, problem);
  }
  if (newer) logger.warn(`sideeffect: ${newer.accepted}`, { schema, unknown });
  return undefined;
}
