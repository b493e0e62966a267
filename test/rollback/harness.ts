/**
 * What the rollback tests share: a Worker running the frozen callers with the plugin set to a
 * `compatibleWith` value (or none), the recorded scenarios run on it, and a replay that names the
 * histories a bundle cannot replay.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import {
  bundleWorkflowCode,
  NativeConnection,
  Worker,
  type WorkflowBundleWithSourceMap,
} from '@temporalio/worker';
import { expect } from 'vitest';
import type { CompatibleWith } from '../../src/protocol/patches.js';
import { MemoryStore } from '../../src/store/memory.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { bundleCallers, quiet } from '../histories/bundle.js';
import { releasedManifests } from '../histories/manifest.js';
import { effects, type Recorded, runScenarios } from '../histories/scenarios.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';

/** A history to replay, named for the failures it may give. */
export type Replayable = Omit<Recorded, 'description'>;

export interface Temporal {
  connection: Connection;
  native: NativeConnection;
  client: Client;
}

export async function connectTemporal(): Promise<Temporal> {
  const connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  const native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
  return { connection, native, client: new Client({ connection, namespace: TEMPORAL_NAMESPACE }) };
}

/**
 * A Worker with the plugin (reminders every second) running the frozen callers, bundled with its
 * `compatibleWith` as the plugin bundles them (once per file: bundleCallers), or `workflowBundle`.
 */
export async function workerOn(
  temporal: Temporal,
  options: {
    taskQueue: string;
    compatibleWith?: CompatibleWith | undefined;
    store?: MemoryStore;
    workflowBundle?: WorkflowBundleWithSourceMap;
    maxCachedWorkflows?: number;
  },
): Promise<Worker> {
  const { taskQueue, compatibleWith, store, workflowBundle, maxCachedWorkflows } = options;
  return Worker.create({
    connection: temporal.native,
    namespace: TEMPORAL_NAMESPACE,
    taskQueue,
    workflowBundle: workflowBundle ?? (await bundleCallers(compatibleWith)),
    ...(maxCachedWorkflows === undefined ? {} : { maxCachedWorkflows }),
    plugins: [
      new SideEffectPlugin({
        store: store ?? new MemoryStore(),
        effects,
        ttlMs: 5_000,
        remindEveryMs: 1_000,
        sweepEveryMs: 0,
        client: temporal.client,
        ...(compatibleWith ? { compatibleWith } : {}),
      }),
    ],
  });
}

/** The recorded scenarios as this version runs them with `compatibleWith` (or without). */
export async function recordOn(
  temporal: Temporal,
  tag: string,
  compatibleWith?: CompatibleWith,
): Promise<Recorded[]> {
  const taskQueue = uniqueTaskQueue(`rollback-${tag}`);
  const store = new MemoryStore();
  const worker = await workerOn(temporal, { taskQueue, compatibleWith, store });
  const running = worker.run();
  try {
    return await runScenarios(temporal.client, taskQueue, `rollback-${tag}`, store);
  } finally {
    worker.shutdown();
    await running;
  }
}

/** Each history's replay failure on `workflowBundle`, by scenario name (none when it replays). */
export async function replayFailures(
  workflowBundle: WorkflowBundleWithSourceMap,
  histories: Replayable[],
): Promise<Record<string, string>> {
  const failures: Record<string, string> = {};
  // In order, one at a time: two snapshots of one run share its workflow id.
  let index = 0;
  for await (const result of Worker.runReplayHistories({ workflowBundle }, histories)) {
    const entry = histories[index++]!;
    expect(result.workflowId).toBe(entry.workflowId);
    if (result.error) failures[entry.name] = String(result.error);
  }
  expect(index).toBe(histories.length);
  return failures;
}

/** A release's recorded histories (test/histories/<version>/), as replay input. */
export async function releasedHistories(version: string): Promise<Replayable[]> {
  const manifest = (await releasedManifests()).find((entry) => entry.version === version)!;
  return Promise.all(
    manifest.histories.map(async (entry) => ({
      name: entry.file,
      workflowId: entry.workflowId,
      history: JSON.parse(await readFile(path.join(manifest.dir, entry.file), 'utf8')),
    })),
  );
}

const frozen = new Map<string, Promise<WorkflowBundleWithSourceMap>>();

/**
 * A released version's frozen callers (./<version>/workflows.ts), bundled once per file: each
 * bundling takes seconds, more under load.
 */
export function frozenCallers(
  version: '0.1.0' | '0.2.0' | '0.3.0',
): Promise<WorkflowBundleWithSourceMap> {
  let bundle = frozen.get(version);
  if (!bundle) {
    const workflowsPath = path.join(
      path.dirname(fileURLToPath(import.meta.url)),
      version,
      'workflows.ts',
    );
    bundle = bundleWorkflowCode({ workflowsPath, logger: quiet });
    frozen.set(version, bundle);
  }
  return bundle;
}
