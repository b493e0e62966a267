/**
 * Our CLI against workers rolled back to 0.1.0 (the frozen workflow code in ./0.1.0/): the CLI
 * names the attempt (`--fence`), 0.1.0's Update validator refuses that field, and the CLI used to
 * exit 3 ("held") although nothing was recorded, without the validator's reason. Now it says the
 * run refused it and why, offers what works there (`--store-only`, or 0.1.0's signal with its risk
 * stated) and exits 1; `--store-only` then decides the key.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { reconcileWorkflowId } from '../../src/workflows/index.js';
import { cliFixture } from '../cli/fixture.js';
import { quiet } from '../histories/bundle.js';
import { effects } from '../histories/scenarios.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { waitFor } from '../temporal/harness.js';

const fx = cliFixture('rollback_cli');
const PREVIOUS = path.join(path.dirname(fileURLToPath(import.meta.url)), '0.1.0', 'workflows.ts');

let connection: Connection;
let native: NativeConnection;
let client: Client;
let worker: Worker;
let running: Promise<void>;
const taskQueue = uniqueTaskQueue('rollback-cli');
const started: WorkflowHandle[] = [];

beforeAll(async () => {
  connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
  client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
  worker = await Worker.create({
    connection: native,
    namespace: TEMPORAL_NAMESPACE,
    taskQueue,
    // 0.1.0's workflow code, as workers rolled back to 0.1.0 run it.
    workflowBundle: await bundleWorkflowCode({ workflowsPath: PREVIOUS, logger: quiet }),
    plugins: [
      new SideEffectPlugin({ store: fx.store, effects, ttlMs: 5_000, sweepEveryMs: 0, client }),
    ],
  });
  running = worker.run();
}, 180_000);

afterAll(async () => {
  for (const handle of started) await handle.terminate('test file finished').catch(() => {});
  worker?.shutdown();
  await running?.catch(() => {});
  await native?.close().catch(() => {});
  await connection?.close().catch(() => {});
});

it("a fenced verdict refused by 0.1.0's validator: said so with its reason and what works there, exit 1", async () => {
  const { key, resource } = await fx.uncertainKey();
  const reconcile = await client.workflow.start('ReconcileWorkflow', {
    taskQueue,
    workflowId: reconcileWorkflowId(key),
    args: [{ key, resource, reason: 'lost' }],
  });
  started.push(reconcile);
  await waitFor(
    async () => (await reconcile.query('status').catch(() => undefined)) ?? undefined,
    'the 0.1.0 reconcile to answer',
    60_000,
  );
  const verdict = ['--fence', '1', '--not-applied', '--reason', 'not at the bank', '--by', 'ann'];
  const refused = await fx.cli(['resolve', key, ...verdict]);
  const told = refused.stdout + refused.stderr;
  expect(refused.code, told).toBe(1);
  expect(told).toContain('unknown field(s) fence');
  expect(told).toContain("runs 0.1's workflow code");
  expect(told).toContain(`--fence 1 --not-applied --reason 'not at the bank' --store-only`);
  expect(told).toContain('--name resolve --input');
  expect(told).toContain('decides whichever attempt that run waits for');
  expect(told).not.toMatch(/pending verdict #/);
  // Nothing was recorded, not even as pending.
  expect((await fx.store.inspect(key))?.state).toBe('uncertain');
  expect(await fx.store.pendingVerdicts(key)).toEqual([]);

  // What it offered works there.
  const stored = await fx.cli(['resolve', key, ...verdict, '--store-only']);
  expect(stored.code, stored.stdout + stored.stderr).toBe(0);
  expect((await fx.store.inspect(key))?.state).toBe('free');
}, 240_000);
