/**
 * Records the workflow histories of a release into test/histories/<version>/,
 * which `npm test` replays against the current workflow code forever after.
 *
 *   npm run histories:record -- 0.2.0      (the dev server must be up: ./temporal-dev.sh)
 *
 * Run it on the release's own commit, before any workflow change lands. Each
 * scenario drives real workflows on the dev server with the frozen callers of
 * ./workflows.ts; a running workflow is recorded too (a history replays from
 * any point), because months-long waits are what deploys meet.
 */
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { defineEffect } from '../../src/activities/index.js';
import { MemoryFencedSink, MemoryStore } from '../../src/store/memory.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import {
  type ReconcileStatus,
  reconcileWorkflowId,
  resolveSignal,
  resolveUpdate,
  statusQuery,
} from '../../src/workflows/index.js';
import {
  TEMPORAL_ADDRESS,
  TEMPORAL_NAMESPACE,
  temporalCliPath,
  uniqueTaskQueue,
} from '../support/temporal.js';
import type { HistoryEntry } from './manifest.js';

const version = process.argv[2];
if (!version || !/^\d+\.\d+\.\d+/.test(version)) {
  console.error('usage: npm run histories:record -- <version>   e.g. 0.2.0');
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const outDir = path.join(here, version);

interface Order {
  account: string;
  amount: number;
  /** How the first apply of the key fails: after the downstream took the write, or before. */
  fail?: 'after-write' | 'before-write';
  /** The probe cannot tell. */
  blindProbe?: boolean;
}

const sink = new MemoryFencedSink();
const ledger: Array<{ key: string; amount: number }> = [];
const attempts = new Map<string, number>();

async function applyOrder(input: Order, key: string, resource: string, fence: number) {
  const attempt = (attempts.get(key) ?? 0) + 1;
  attempts.set(key, attempt);
  if (input.fail === 'before-write' && attempt === 1) throw new Error('connection refused');
  const line = await sink.writeFenced(resource, fence, async () =>
    ledger.push({ key, amount: input.amount }),
  );
  if (input.fail === 'after-write' && attempt === 1)
    throw new Error('connection reset after the write');
  return { receipt: `r-${line}` };
}

const effects = {
  order: defineEffect({
    resource: (input: Order) => `account:${input.account}`,
    apply: (input: Order, { key, lease }) => applyOrder(input, key, lease.resource, lease.fence),
  }),
  probedOrder: defineEffect({
    resource: (input: Order) => `account:${input.account}`,
    apply: (input: Order, { key, lease }) => applyOrder(input, key, lease.resource, lease.fence),
    probe: async (input: Order, { key, resource, fence }) => {
      if (input.blindProbe) return undefined;
      return sink.readFenced(resource, fence, async () => {
        const line = ledger.findIndex((entry) => entry.key === key);
        return line < 0
          ? { applied: false as const }
          : { applied: true as const, result: { receipt: `r-${line + 1}` } };
      });
    },
  }),
};

const connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
const native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
const client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
const taskQueue = uniqueTaskQueue(`histories-${version}`);
const plugin = new SideEffectPlugin({
  store: new MemoryStore(),
  effects,
  ttlMs: 5_000,
  remindEveryMs: 1_000,
  sweepEveryMs: 0,
  client,
});
const worker = await Worker.create({
  connection: native,
  namespace: TEMPORAL_NAMESPACE,
  taskQueue,
  workflowsPath: path.join(here, 'workflows.ts'),
  plugins: [plugin],
});
const running = worker.run();

const activity = { heartbeatTimeout: '10 seconds', startToCloseTimeout: '1 minute' };
const entries: HistoryEntry[] = [];
let sequence = 0;

function start(workflow: string, args: unknown[]): Promise<WorkflowHandle> {
  const workflowId = `histories-${version}-${workflow}-${Date.now().toString(36)}-${++sequence}`;
  return client.workflow.start(workflow, { taskQueue, workflowId, args });
}

async function record(name: string, description: string, handle: WorkflowHandle): Promise<void> {
  // The temporal CLI writes the same JSON as the UI's download, so a user's own export replays too.
  const { stdout } = await run(temporalCliPath(), [
    'workflow',
    'show',
    '--workflow-id',
    handle.workflowId,
    '--output',
    'json',
    '--address',
    TEMPORAL_ADDRESS,
    '--namespace',
    TEMPORAL_NAMESPACE,
  ]);
  const events = (JSON.parse(stdout) as { events: unknown[] }).events.length;
  const { type } = await handle.describe();
  const file = `${name}.json`;
  await writeFile(path.join(outDir, file), stdout);
  entries.push({ file, workflowType: type, workflowId: handle.workflowId, description });
  console.log(`recorded ${file} (${events} events, ${type})`);
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** The uncertain key's ReconcileWorkflow, once its status query says `state`. */
async function reconcileIn(key: string, state: ReconcileStatus['state']): Promise<WorkflowHandle> {
  const handle = client.workflow.getHandle(reconcileWorkflowId(key));
  await waitFor(`reconcile/${key} to be ${state}`, async () => {
    const status = await handle.query(statusQuery);
    return status.state === state ? status : undefined;
  });
  return handle;
}

const run = promisify(execFile);
const keyOf = (handle: WorkflowHandle, step: string) => `${handle.workflowId}/${step}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

try {
  await mkdir(outDir, { recursive: true });

  const applied = await start('guarded', ['order', { account: 'h1', amount: 5 }, activity]);
  await applied.result();
  await record('caller-applied', 'one guarded call that applies', applied);

  const replayed = await start('guardedTwice', [
    'order',
    { account: 'h2', amount: 6 },
    { ...activity, step: 'pay' },
  ]);
  await replayed.result();
  await record('caller-replayed', 'the same step twice: applied, then replayed', replayed);

  // Uncertain after the write, a malformed signal refused, reminders and rechecks fire, then a CLI-style signal: applied.
  const bySignal = await start('guarded', [
    'order',
    { account: 'h3', amount: 7, fail: 'after-write' },
    { ...activity, step: 'pay', recheckEvery: '1 second' },
  ]);
  const signalKey = keyOf(bySignal, 'pay');
  const signalled = await reconcileIn(signalKey, 'waiting');
  await signalled.signal(resolveSignal, { applied: 'yes' } as never);
  await sleep(3_500);
  await record(
    'caller-waiting',
    'a caller waiting for a verdict, rechecking every second',
    bySignal,
  );
  await record(
    'reconcile-waiting',
    'waiting for a person: a malformed signal refused, reminders every second',
    signalled,
  );
  await signalled.signal(resolveSignal, {
    applied: true,
    result: { receipt: 'r-3' },
    reason: 'the bank export lists it',
    by: 'ops@example.com',
  });
  await bySignal.result();
  await record(
    'caller-reconciled-applied',
    'a caller that waited; the verdict was applied, so the recorded result returns',
    bySignal,
  );
  await record('reconcile-resolved-signal', 'resolved by a resolve signal (applied)', signalled);

  // Uncertain before the write, no probe answer; an Update says not applied and the caller runs the effect again.
  const byUpdate = await start('guarded', [
    'probedOrder',
    { account: 'h4', amount: 8, fail: 'before-write', blindProbe: true },
    { ...activity, step: 'pay' },
  ]);
  const updateKey = keyOf(byUpdate, 'pay');
  const updated = await reconcileIn(updateKey, 'waiting');
  await updated.executeUpdate(resolveUpdate, {
    args: [{ applied: false, reason: 'not in the bank export', by: 'ops@example.com' }],
  });
  await byUpdate.result();
  await record(
    'caller-reconciled-not-applied',
    'a caller that waited; the verdict was not applied, so the effect ran again',
    byUpdate,
  );
  await record(
    'reconcile-resolved-update',
    'a blind probe, then resolved by the resolve Update (not applied)',
    updated,
  );

  // Uncertain after the write; the probe reads the downstream through the fence and finds it applied.
  const byProbe = await start('guarded', [
    'probedOrder',
    { account: 'h5', amount: 9, fail: 'after-write' },
    { ...activity, step: 'pay' },
  ]);
  await byProbe.result();
  await record('caller-reconciled-probe', 'a caller whose key the probe decided', byProbe);
  const probed = client.workflow.getHandle(reconcileWorkflowId(keyOf(byProbe, 'pay')));
  await probed.result();
  await record('reconcile-probed', 'decided by the probe (applied)', probed);

  // Five orders, at most two at a time: which activities each workflow task schedules is the fan-out's contract.
  const fannedOut = await start('fanOut', [
    'order',
    [1, 2, 3, 4, 5].map((n) => ({ account: `h6-${n}`, amount: n })),
    2,
    activity,
  ]);
  await fannedOut.result();
  await record(
    'caller-fan-out',
    'five guarded calls, at most two in flight (sideEffects)',
    fannedOut,
  );

  await writeFile(
    path.join(outDir, 'manifest.json'),
    `${JSON.stringify({ version, recordedAt: new Date().toISOString(), histories: entries }, null, 2)}\n`,
  );
  console.log(`wrote ${entries.length} histories to ${path.relative(process.cwd(), outDir)}/`);
} finally {
  worker.shutdown();
  await running;
  await native.close();
  await connection.close();
}
