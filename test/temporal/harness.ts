/**
 * Shared setup of the Temporal suites: one task queue and one in-process
 * Worker with the SideEffectPlugin per test file against the dev server, the test workflows
 * bundled once per file, the real `temporal` CLI, and a ledger behind a
 * FencedSink to count downstream writes.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import {
  bundleWorkflowCode,
  DefaultLogger,
  NativeConnection,
  Runtime,
  Worker,
  type WorkflowBundleWithSourceMap,
} from '@temporalio/worker';
import type { Fence } from '../../src/core/types.js';
import { MemoryFencedSink } from '../../src/store/memory.js';
import { waitForReconcile } from '../../src/testing/index.js';
import { SideEffectPlugin, type SideEffectPluginOptions } from '../../src/worker/index.js';
import { type ReconcileStatus, reconcileWorkflowId } from '../../src/workflows/index.js';
import {
  TEMPORAL_ADDRESS,
  TEMPORAL_NAMESPACE,
  temporalCliPath,
  uniqueTaskQueue,
} from '../support/temporal.js';

// Worker state changes and replay workers are logged at INFO; keep test output to what matters.
Runtime.install({ logger: new DefaultLogger('WARN') });

export const WORKFLOWS_PATH = fileURLToPath(new URL('./workflows.ts', import.meta.url));

let bundle: Promise<WorkflowBundleWithSourceMap> | undefined;

/** The test workflows (with ReconcileWorkflow), bundled once per test file. */
export function testBundle(): Promise<WorkflowBundleWithSourceMap> {
  bundle ??= bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH });
  return bundle;
}

export interface Harness {
  client: Client;
  taskQueue: string;
  worker: Worker;
  /** The plugin on `worker`: its activities (the sweep, to run by hand) and its client. */
  plugin: SideEffectPlugin;
  /** Starts a test workflow on this file's task queue and remembers it for replay and cleanup. */
  start(workflow: string, args: unknown[], workflowId?: string): Promise<WorkflowHandle>;
  /** The ReconcileWorkflow of `key`, remembered for replay. */
  reconcile(key: string): WorkflowHandle;
  /** Polls the key's ReconcileWorkflow until its status query says `state`. */
  waitForReconcile(key: string, state: ReconcileStatus['state']): Promise<ReconcileStatus>;
  /** Replays every remembered workflow's recorded history; resolves to the failures (none expected). */
  replayAll(): Promise<Array<{ workflowId: string; error: unknown }>>;
  close(): Promise<void>;
}

export async function startHarness(
  prefix: string,
  options: Omit<SideEffectPluginOptions, 'taskQueue' | 'client'>,
): Promise<Harness> {
  const connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  const native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
  const client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
  const taskQueue = uniqueTaskQueue(prefix);
  const workflowBundle = await testBundle();
  const plugin = new SideEffectPlugin({ sweepEveryMs: 0, ...options, client });
  const worker = await Worker.create({
    connection: native,
    namespace: TEMPORAL_NAMESPACE,
    taskQueue,
    workflowBundle,
    plugins: [plugin],
  });
  const running = worker.run();
  const tracked = new Map<string, WorkflowHandle>();
  const track = (handle: WorkflowHandle): WorkflowHandle => {
    tracked.set(handle.workflowId, handle);
    return handle;
  };
  let sequence = 0;

  const harness: Harness = {
    client,
    taskQueue,
    worker,
    plugin,
    async start(workflow, args, workflowId = `${prefix}-${taskQueue}-${++sequence}`) {
      return track(await client.workflow.start(workflow, { taskQueue, workflowId, args }));
    },
    reconcile: (key) => track(client.workflow.getHandle(reconcileWorkflowId(key))),
    async waitForReconcile(key, state) {
      harness.reconcile(key);
      return waitForReconcile(client, key, { state });
    },
    async replayAll() {
      const failures: Array<{ workflowId: string; error: unknown }> = [];
      for (const handle of tracked.values()) {
        const history = await handle.fetchHistory();
        try {
          await Worker.runReplayHistory({ workflowBundle }, history, handle.workflowId);
        } catch (error) {
          failures.push({ workflowId: handle.workflowId, error });
        }
      }
      return failures;
    },
    async close() {
      // Nothing a failed test left waiting may outlive the file on the shared dev server.
      for (const handle of tracked.values()) {
        await handle.terminate('test file finished').catch(() => {});
      }
      worker.shutdown();
      await running;
      await native.close();
      await connection.close();
    },
  };
  return harness;
}

/** Polls `probe` until it returns something other than undefined; fails after `timeoutMs`. */
export async function waitFor<T>(
  probe: () => Promise<T | undefined> | T | undefined,
  what: string,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const run = promisify(execFile);

/** Runs the real `temporal` CLI against the dev server, exactly as an operator would. */
export async function temporalCli(args: string[]): Promise<string> {
  const { stdout } = await run(temporalCliPath(), [
    ...args,
    '--address',
    TEMPORAL_ADDRESS,
    '--namespace',
    TEMPORAL_NAMESPACE,
  ]);
  return stdout;
}

/** `temporal workflow signal --name resolve --input '<json>'` on the key's ReconcileWorkflow. */
export function signalResolveWithCli(key: string, json: string): Promise<string> {
  return temporalCli([
    'workflow',
    'signal',
    '--workflow-id',
    reconcileWorkflowId(key),
    '--name',
    'resolve',
    '--input',
    json,
  ]);
}

export interface LedgerEntry {
  resource: string;
  fence: Fence;
  key: string;
  value: unknown;
}

/** The downstream: every accepted write lands here, behind a MemoryFencedSink. */
export class Ledger {
  readonly sink = new MemoryFencedSink();
  readonly entries: LedgerEntry[] = [];

  write(resource: string, fence: Fence, key: string, value: unknown): Promise<number> {
    return this.sink.writeFenced(resource, fence, async () => {
      this.entries.push({ resource, fence, key, value });
      return this.entries.length;
    });
  }

  byKey(key: string): LedgerEntry[] {
    return this.entries.filter((entry) => entry.key === key);
  }
}

/** A promise with its resolver, for holding an apply until the test lets it go. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
