/** SideEffectPlugin on an app's own Worker and Client, against the dev server. */

import { fileURLToPath } from 'node:url';
import { Client, Connection, type WorkflowClientInterceptor } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger, NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { ActivityNameClashError, InvalidActionError } from '../../src/core/errors.js';
import { libraryActivityNames } from '../../src/protocol/wire.js';
import { MemoryStore } from '../../src/store/memory.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import {
  reconcileWorkflowId,
  resolveSignal,
  type SideEffectOutcome,
  statusQuery,
} from '../../src/workflows/index.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { testBundle, WORKFLOWS_PATH, waitFor } from '../temporal/harness.js';

let native: NativeConnection;
let connection: Connection;

beforeAll(async () => {
  native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
  connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
});

afterAll(async () => {
  await connection?.close();
  await native?.close();
});

const noop = defineEffect({ resource: () => 'r', apply: async () => 'ok' });

describe('SideEffectPlugin', () => {
  it('fails Worker.create when one of your activities has a library activity name', async () => {
    const create = (activities: object, legacyActivityNames?: boolean) =>
      Worker.create({
        connection: native,
        namespace: TEMPORAL_NAMESPACE,
        taskQueue: uniqueTaskQueue('plugin-clash'),
        workflowBundle: { code: 'globalThis.__webpack_module_cache__ = {};' },
        activities,
        plugins: [
          new SideEffectPlugin({
            store: new MemoryStore(),
            effects: { noop },
            ttlMs: 1_000,
            ...(legacyActivityNames === undefined ? {} : { legacyActivityNames }),
          }),
        ],
      });
    const clash = await create({ [libraryActivityNames.resolveKey]: async () => null }).catch(
      (error: unknown) => error,
    );
    expect(clash).toBeInstanceOf(ActivityNameClashError);
    expect(clash).toMatchObject({
      code: 'ACTIVITY_NAME_CLASH',
      names: [libraryActivityNames.resolveKey],
    });
    // A 0.1.0 name is taken too while the aliases are on; the message says how to drop them.
    const legacy = await create({ inspectKey: async () => null, noop: async () => 1 }).catch(
      (error: unknown) => error,
    );
    expect(legacy).toMatchObject({ code: 'ACTIVITY_NAME_CLASH', names: ['noop', 'inspectKey'] });
    expect((legacy as Error).message).toMatch(/legacyActivityNames: false/);
  });

  it("runs beside the app's activities on its own Worker and starts ReconcileWorkflows through the app's Client", async () => {
    const started: string[] = [];
    const spy: WorkflowClientInterceptor = {
      async signalWithStart(input, next) {
        started.push(`${input.workflowType}:${input.options.workflowId}`);
        return next(input);
      },
    };
    const client = new Client({
      connection,
      namespace: TEMPORAL_NAMESPACE,
      interceptors: { workflow: [spy] },
    });
    const store = new MemoryStore();
    const lost = defineEffect({
      resource: () => 'plugin-account',
      async apply() {
        throw new Error('connection reset after the write');
      },
    });
    const taskQueue = uniqueTaskQueue('plugin');
    const plugin = new SideEffectPlugin({ store, effects: { lost }, ttlMs: 2_000, client });
    const worker = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue,
      workflowBundle: await testBundle(),
      activities: { greet: async () => 'hello' },
      plugins: [plugin],
    });
    expect(plugin.client).toBe(client);
    const workflowId = `${taskQueue}-lost`;
    const key = `${workflowId}/lost`;
    const outcome = await worker.runUntil(async () => {
      const handle = await client.workflow.start('guarded', {
        taskQueue,
        workflowId,
        args: ['lost', { amount: 1 }],
      });
      const reconcile = client.workflow.getHandle(reconcileWorkflowId(key));
      await waitFor(
        async () =>
          (await reconcile.query(statusQuery).catch(() => undefined))?.state === 'waiting' ||
          undefined,
        'the reconcile to wait',
      );
      await reconcile.signal(resolveSignal, {
        applied: true,
        result: 'seen at the bank',
        reason: 'checked',
        fence: (await store.inspect(key))!.fence,
      });
      return (await handle.result()) as SideEffectOutcome<unknown>;
    });
    expect(outcome).toEqual({ outcome: 'reconciled', result: 'seen at the bank', key });
    expect(started).toEqual([`ReconcileWorkflow:${reconcileWorkflowId(key)}`]);
    expect((await store.inspect(key))?.state).toBe('done');
  });

  it("refuses a client on another namespace than the Worker's", async () => {
    const refused = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue: uniqueTaskQueue('plugin-namespace'),
      workflowBundle: await testBundle(),
      plugins: [
        new SideEffectPlugin({
          store: new MemoryStore(),
          effects: { noop },
          ttlMs: 1_000,
          client: new Client({ connection, namespace: 'payments-elsewhere' }),
        }),
      ],
    }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(InvalidActionError);
    expect((refused as Error).message).toContain('"payments-elsewhere"');
    expect((refused as Error).message).toContain(`"${TEMPORAL_NAMESPACE}"`);
  });

  it('refuses workflows without ReconcileWorkflow before they run, naming the re-export', async () => {
    const workflowsPath = fileURLToPath(
      new URL('./workflows-without-reconcile.ts', import.meta.url),
    );
    const create = (workflows: { workflowsPath: string } | { workflowBundle: { code: string } }) =>
      Worker.create({
        connection: native,
        namespace: TEMPORAL_NAMESPACE,
        taskQueue: uniqueTaskQueue('plugin-workflows'),
        ...workflows,
        plugins: [
          new SideEffectPlugin({ store: new MemoryStore(), effects: { noop }, ttlMs: 1_000 }),
        ],
      }).catch((error: unknown) => error);
    const fix = "export { ReconcileWorkflow } from 'sideeffect/workflows';";
    const fromPath = await create({ workflowsPath });
    expect(fromPath).toBeInstanceOf(InvalidActionError);
    expect((fromPath as Error).message).toContain(workflowsPath);
    expect((fromPath as Error).message).toContain(fix);
    // A prebuilt bundle is checked by the time the Worker runs: run() fails at once.
    const bundle = await bundleWorkflowCode({ workflowsPath, logger: new DefaultLogger('ERROR') });
    const withBundle = await create({ workflowBundle: bundle });
    expect(withBundle).toBeInstanceOf(Worker);
    const fromBundle = await (withBundle as Worker).run().catch((error: unknown) => error);
    expect(fromBundle).toBeInstanceOf(InvalidActionError);
    expect((fromBundle as Error).message).toContain(fix);
    // The same module with the re-export passes both checks.
    for (const good of [
      await create({ workflowsPath: WORKFLOWS_PATH }),
      await create({ workflowBundle: await testBundle() }),
    ]) {
      expect(good).toBeInstanceOf(Worker);
      await (good as Worker).runUntil(Promise.resolve());
    }
  });
});
