/**
 * Records the workflow histories of a release into test/histories/<version>/,
 * which `npm test` replays against the current workflow code forever after.
 *
 *   npm run histories:record -- 0.2.0      (a Temporal server must answer: ./temporal-dev.sh)
 *
 * Run it on the release's own commit, before any workflow change lands. The
 * scenarios (./scenarios.ts) drive real workflows with the frozen callers of
 * ./workflows.ts; a running workflow is recorded too (a history replays from
 * any point), because months-long waits are what deploys meet. A release's
 * folder is never written twice.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { type History, historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { NativeConnection, Worker } from '@temporalio/worker';
import { MemoryStore } from '../../src/store/memory.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { HISTORIES_DIR, type HistoryEntry, type Manifest } from './manifest.js';
import { effects, runScenarios } from './scenarios.js';

const version = process.argv[2];
if (!version || !/^\d+\.\d+\.\d+/.test(version)) {
  console.error('usage: npm run histories:record -- <version>   e.g. 0.2.0');
  process.exit(2);
}
const outDir = path.join(HISTORIES_DIR, version);
if (existsSync(outDir)) {
  console.error(`${outDir} exists: a release's histories never change once recorded`);
  process.exit(2);
}

const connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
const native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
const client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
const store = new MemoryStore();
try {
  const worker = await Worker.create({
    connection: native,
    namespace: TEMPORAL_NAMESPACE,
    taskQueue: uniqueTaskQueue(`histories-${version}`),
    workflowsPath: path.join(HISTORIES_DIR, 'workflows.ts'),
    plugins: [
      new SideEffectPlugin({
        store,
        effects,
        ttlMs: 5_000,
        remindEveryMs: 1_000,
        sweepEveryMs: 0,
        client,
      }),
    ],
  });
  const recorded = await worker.runUntil(
    runScenarios(client, worker.options.taskQueue, `histories-${version}`, store),
  );

  await mkdir(outDir, { recursive: true });
  const histories: HistoryEntry[] = [];
  for (const { name, description, workflowId, history } of recorded) {
    const events = (history as History).events ?? [];
    const workflowType =
      events[0]?.workflowExecutionStartedEventAttributes?.workflowType?.name ?? 'unknown';
    const file = `${name}.json`;
    // The UI's "Download" format (and `temporal workflow show --output json`'s), so a user's own export replays too.
    await writeFile(path.join(outDir, file), `${historyToJSON(history as History)}\n`);
    histories.push({ file, workflowType, workflowId, description });
    console.log(`recorded ${file} (${events.length} events, ${workflowType})`);
  }
  const manifest: Manifest = { version, recordedAt: new Date().toISOString(), histories };
  await writeFile(path.join(outDir, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  // Formatted as `npm run lint` checks them (whitespace only: the histories replay the same).
  execFileSync('npx', ['biome', 'format', '--write', outDir], { stdio: 'inherit' });
  console.log(`wrote ${histories.length} histories to ${path.relative(process.cwd(), outDir)}/`);
} finally {
  await native.close();
  await connection.close();
}
