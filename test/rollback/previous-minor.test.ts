import type { Client } from '@temporalio/client';
import {
  DefaultLogger,
  Runtime,
  Worker,
  type WorkflowBundleWithSourceMap,
} from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidActionError } from '../../src/core/errors.js';
import { heldPatches, workflowPatches } from '../../src/protocol/patches.js';
import { MemoryStore } from '../../src/store/memory.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { reconcileWorkflowId, resolveSignal, statusQuery } from '../../src/workflows/index.js';
import { bundleCallers } from '../histories/bundle.js';
import { patchesIn } from '../histories/markers.js';
import { effects, patchesReached, type Recorded } from '../histories/scenarios.js';
import { TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import {
  connectTemporal,
  frozenCallers,
  type Replayable,
  recordOn,
  releasedHistories,
  replayFailures,
  type Temporal,
  workerOn,
} from './harness.js';

Runtime.install({ logger: new DefaultLogger('WARN') });

let temporal: Temporal;
let client: Client;
/** The scenarios as this version ran them with `compatibleWith: '0.1'`, and without it. */
let compatible: Recorded[];
let unrestricted: Recorded[];

async function waitUntil(check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

beforeAll(async () => {
  temporal = await connectTemporal();
  client = temporal.client;
  // One after the other: each scenario waits on reminders and rechecks of one second, and a
  // paused caller on its timers (about a minute a set on a quiet machine).
  compatible = await recordOn(temporal, 'compat', '0.1');
  unrestricted = await recordOn(temporal, 'new');
}, 420_000);

afterAll(async () => {
  await temporal?.native.close();
  await temporal?.connection.close();
});

describe("compatibleWith: '0.1' keeps a rollback to 0.1.0 replayable", () => {
  it('records every scenario both ways', () => {
    const names = compatible.map((entry) => entry.name);
    expect(names).toEqual([
      'caller-applied',
      'caller-replayed',
      'caller-waiting',
      'reconcile-waiting',
      'caller-reconciled-applied',
      'reconcile-resolved-signal',
      'caller-reconciled-not-applied',
      'reconcile-resolved-update',
      'caller-reconciled-probe',
      'reconcile-probed',
      'caller-fan-out',
      'caller-cancelled',
      'caller-refusals',
      'reconcile-refusals',
      'caller-forged',
      'reconcile-unnamed-verdict',
      'caller-paused',
      'caller-paused-given-up',
      'reconcile-continued',
    ]);
    expect(unrestricted.map((entry) => entry.name)).toEqual(names);
  });

  it('holds every patch 0.1 does not know: no marker in any run it executed', () => {
    expect(heldPatches('0.1').sort()).toEqual(Object.keys(workflowPatches).sort());
    const taken = (histories: Recorded[]) =>
      Object.fromEntries(histories.map((entry) => [entry.name, patchesIn(entry.history)]));
    const held = taken(compatible);
    // Only the store read a signal not naming the caller's run forces, in the run that got one.
    expect(held['caller-forged']).toEqual(['sideeffect-reconciled-reads-store']);
    expect(
      Object.entries(held).flatMap(([name, ids]) => (name === 'caller-forged' ? [] : ids)),
    ).toEqual([]);
    // Without the option every scenario takes patches (so the replay below can fail), each of
    // them one the registry knows, and together every patch these scenarios reach.
    const unheld = taken(unrestricted);
    for (const [name, ids] of Object.entries(unheld))
      expect(ids.length, `${name} takes a patch`).toBeGreaterThan(0);
    expect(new Set(Object.values(unheld).flat())).toEqual(new Set(patchesReached));
  });

  it("0.1.0's workflow code replays every run made with the option, but the caller that refused a forged reconciled", async () => {
    const previous = await frozenCallers('0.1.0');
    // 0.1.0 returned whatever a well-formed `reconciled` carried; a run that refuses one cannot
    // replay there, however it refuses (docs/versioning.md): it keeps the protection instead.
    const failures = await replayFailures(previous, compatible);
    expect(Object.keys(failures)).toEqual(['caller-forged']);
    expect(failures['caller-forged']).toMatch(/sideeffect-reconciled-reads-store/);
  }, 120_000);

  it("0.1.0's workflow code fails the same scenarios run without the option", async () => {
    const previous = await frozenCallers('0.1.0');
    const failures = await replayFailures(previous, unrestricted);
    expect(Object.keys(failures).sort()).toEqual(unrestricted.map((entry) => entry.name).sort());
    for (const failure of Object.values(failures)) expect(failure).toMatch(/[Nn]ondetermin/);
  }, 120_000);

  it('the current code replays both sets and the 0.1.0 histories, with the option and without', async () => {
    const plain = await bundleCallers();
    const held = await bundleCallers('0.1');
    expect(held.code).toContain('sideeffect-compatible-with:0.1');
    expect(plain.code).not.toContain('sideeffect-compatible-with:0.1');
    const everything = [...compatible, ...unrestricted, ...(await releasedHistories('0.1.0'))];
    expect(await replayFailures(plain, everything)).toEqual({});
    // Set after runs took patches, it keeps them: those histories replay as they were made.
    expect(await replayFailures(held, everything)).toEqual({});
  }, 180_000);
});

describe('compatibleWith set after runs took patches', () => {
  it('a run that took patches finishes on a worker with the option and replays either way', async () => {
    const store = new MemoryStore();
    const taskQueue = uniqueTaskQueue('rollback-mixed');
    // No sticky cache: the second worker takes over at once instead of after a timeout.
    const before = await workerOn(temporal, { taskQueue, store, maxCachedWorkflows: 0 });
    const runningBefore = before.run();
    const caller = await client.workflow.start('guarded', {
      taskQueue,
      workflowId: `rollback-mixed-${Date.now().toString(36)}`,
      args: [
        'order',
        { account: 'mixed', amount: 11, fail: 'after-write' },
        { heartbeatTimeout: '10 seconds', step: 'pay', recheckEvery: '1 second' },
      ],
    });
    const reconcile = client.workflow.getHandle(reconcileWorkflowId(`${caller.workflowId}/pay`));
    await waitUntil(async () => (await reconcile.query(statusQuery)).state === 'waiting');
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    before.shutdown();
    await runningBefore;

    const after = await workerOn(temporal, {
      taskQueue,
      store,
      maxCachedWorkflows: 0,
      compatibleWith: '0.1',
    });
    const runningAfter = after.run();
    try {
      await reconcile.signal(resolveSignal, {
        applied: true,
        result: { receipt: 'r-mixed' },
        reason: 'found',
        by: 'ops@example.com',
      });
      expect(await caller.result()).toMatchObject({
        outcome: 'reconciled',
        result: { receipt: 'r-mixed' },
      });
      await reconcile.result();
    } finally {
      after.shutdown();
      await runningAfter;
    }
    const histories: Replayable[] = [
      { name: 'caller', workflowId: caller.workflowId, history: await caller.fetchHistory() },
      {
        name: 'reconcile',
        workflowId: reconcile.workflowId,
        history: await reconcile.fetchHistory(),
      },
    ];
    // Patches taken before the switch stay taken; those first asked after it are held.
    const [callerPatches, reconcilePatches] = histories.map((entry) => patchesIn(entry.history));
    expect(callerPatches).toContain('sideeffect-effect-wait-cancellation');
    expect(callerPatches).toContain('sideeffect.namespaced-activities');
    expect(callerPatches).not.toContain('sideeffect-reconciled-reads-store');
    expect(reconcilePatches).toContain('sideeffect.namespaced-activities');
    expect(reconcilePatches).not.toContain('sideeffect-verdict-context');
    const plain = await bundleCallers();
    const held = await bundleCallers('0.1');
    expect(await replayFailures(plain, histories)).toEqual({});
    expect(await replayFailures(held, histories)).toEqual({});
  }, 180_000);
});

describe("compatibleWith on a Worker that runs the library's own workflows", () => {
  it('builds the setting into the bundle the plugin makes of them', async () => {
    const activityTypes = async (compatibleWith?: '0.1') => {
      const taskQueue = uniqueTaskQueue('rollback-own');
      const worker = await Worker.create({
        connection: temporal.native,
        namespace: TEMPORAL_NAMESPACE,
        taskQueue,
        plugins: [
          new SideEffectPlugin({
            store: new MemoryStore(),
            effects,
            ttlMs: 5_000,
            sweepEveryMs: 0,
            client,
            ...(compatibleWith ? { compatibleWith } : {}),
          }),
        ],
      });
      const key = `${taskQueue}/own`;
      return worker.runUntil(async () => {
        const handle = await client.workflow.start('ReconcileWorkflow', {
          taskQueue,
          workflowId: reconcileWorkflowId(key),
          args: [{ key, resource: 'own', reason: 'test', searchAttributes: false }],
        });
        // The store never saw the key, so the reconcile ends at its first store read.
        await handle.result();
        const history = await handle.fetchHistory();
        return {
          patches: patchesIn(history),
          scheduled: (history.events ?? []).flatMap((event) => {
            const name = event.activityTaskScheduledEventAttributes?.activityType?.name;
            return name ? [name] : [];
          }),
        };
      });
    };
    expect(await activityTypes('0.1')).toEqual({ patches: [], scheduled: ['inspectKey'] });
    expect(await activityTypes()).toEqual({
      patches: ['sideeffect.namespaced-activities', 'sideeffect-held-verdicts'],
      scheduled: ['sideeffect.inspectKey'],
    });
  }, 120_000);
});

describe('compatibleWith is checked', () => {
  it('refuses a version it does not know', () => {
    const create = (version: unknown) =>
      new SideEffectPlugin({
        store: new MemoryStore(),
        effects,
        ttlMs: 5_000,
        compatibleWith: version as '0.1',
      });
    for (const version of ['0.4', '0.1.0', 0.1, '', 'latest']) {
      const error = (() => {
        try {
          create(version);
        } catch (thrown) {
          return thrown;
        }
      })();
      expect(error).toBeInstanceOf(InvalidActionError);
      expect((error as InvalidActionError).code).toBe('INVALID_ACTION');
      expect((error as InvalidActionError).message).toMatch(/compatibleWith.*'0\.1'/);
    }
    for (const version of ['0.1', '0.2', '0.3']) expect(() => create(version)).not.toThrow();
  });

  it('refuses a prebuilt bundle built with another setting, and runs one built with the same', async () => {
    const held = await bundleCallers('0.1');
    const plain = await bundleCallers();
    const create = (workflowBundle: WorkflowBundleWithSourceMap, compatibleWith?: '0.1') =>
      workerOn(temporal, {
        taskQueue: uniqueTaskQueue('rollback-bundle'),
        workflowBundle,
        compatibleWith,
      });
    await expect(create(plain, '0.1')).rejects.toThrow(
      /workflowBundle was built without compatibleWith but SideEffectPlugin's compatibleWith is '0\.1'/,
    );
    await expect(create(held)).rejects.toThrow(
      /workflowBundle was built with compatibleWith '0\.1' but SideEffectPlugin's compatibleWith is none/,
    );
    // Accepted: each runs (and stops) as a Worker, which also releases the shared connection.
    for (const worker of [await create(held, '0.1'), await create(plain)])
      await worker.runUntil(new Promise((resolve) => setTimeout(resolve, 200)));
  }, 120_000);
});
