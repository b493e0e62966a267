/**
 * Worker Versioning on the dev server: workers of a deployment whose default behavior is PINNED
 * (the app's own workflows stay on the version that started them). A ReconcileWorkflow started
 * on version v1 must still take a verdict after the usual deploy: v2 becomes current and the v1
 * workers stop. It declares AUTO_UPGRADE, so it moves to v2 instead of waiting for v1 forever.
 */
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidActionError } from '../../src/core/errors.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { reconcileWorkflowId, resolveSignal, statusQuery } from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { temporalCli, testBundle, waitFor } from './harness.js';

let db: FreshSchema;
let native: NativeConnection;
let connection: Connection;
let client: Client;

beforeAll(async () => {
  [db, native, connection] = await Promise.all([
    freshSchema('versioning'),
    NativeConnection.connect({ address: TEMPORAL_ADDRESS }),
    Connection.connect({ address: TEMPORAL_ADDRESS }),
  ]);
  await migrate(db.pool, { schema: db.schema });
  client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
});

afterAll(async () => {
  await connection?.close();
  await native?.close();
  await db?.drop();
});

describe('Worker Versioning', () => {
  it('a ReconcileWorkflow started on v1 takes its verdict on v2 after v1 is retired', async () => {
    const store = new PgStore({ pool: db.pool, schema: db.schema });
    const taskQueue = uniqueTaskQueue('versioning');
    const deploymentName = `sideeffect-${randomBytes(4).toString('hex')}`;
    const workflowBundle = await testBundle();
    const versioned = async (buildId: string) => {
      const worker = await Worker.create({
        connection: native,
        namespace: TEMPORAL_NAMESPACE,
        taskQueue,
        workflowBundle,
        workerDeploymentOptions: {
          useWorkerVersioning: true,
          version: { deploymentName, buildId },
          defaultVersioningBehavior: 'PINNED',
        },
        plugins: [new SideEffectPlugin({ store, effects: {}, ttlMs: 2_000, sweepEveryMs: 0 })],
      });
      const running = worker.run();
      // The version exists once its worker polled; then it can become current.
      await waitFor(
        () =>
          temporalCli([
            'worker',
            'deployment',
            'set-current-version',
            '--deployment-name',
            deploymentName,
            '--build-id',
            buildId,
            '--yes',
          ]).then(
            () => true,
            () => undefined,
          ),
        `version ${buildId} to become current`,
      );
      return { worker, running };
    };

    // An uncertain key, as a worker that died mid-apply leaves it.
    const action = { key: `${taskQueue}/charge`, resource: `${taskQueue}/card` };
    const grant = await store.acquire(action, 60_000, { applying: true });
    if (grant.outcome !== 'granted') throw new Error(grant.outcome);
    await store.markUncertain(action, grant.lease, 'worker died mid-apply');

    const v1 = await versioned('v1');
    const reconcile = await client.workflow.start('ReconcileWorkflow', {
      taskQueue,
      workflowId: reconcileWorkflowId(action.key),
      args: [{ ...action, reason: 'worker died mid-apply', fence: grant.lease.fence }],
    });
    try {
      await waitFor(
        async () =>
          (await reconcile.query(statusQuery).catch(() => undefined))?.state === 'waiting' ||
          undefined,
        'the reconcile to wait on v1',
      );
      const onV1 = await reconcile.describe();
      expect(onV1.raw.workflowExecutionInfo?.versioningInfo?.behavior).toBe(
        // temporal.api.enums.v1.VersioningBehavior.VERSIONING_BEHAVIOR_AUTO_UPGRADE
        2,
      );

      const v2 = await versioned('v2');
      v1.worker.shutdown();
      await v1.running;
      try {
        await reconcile.signal(resolveSignal, {
          applied: false,
          reason: 'not in the bank export',
          by: 'ops',
          fence: (await store.inspect(action.key))!.fence,
        });
        const resolution = (await reconcile.result()) as ReconcileResolution;
        expect(resolution).toMatchObject({ applied: false, decidedBy: 'signal' });
        expect((await store.inspect(action.key))?.state).toBe('free');
        const done = await reconcile.describe();
        expect(done.raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion?.buildId).toBe(
          'v2',
        );
      } finally {
        v2.worker.shutdown();
        await v2.running;
      }
    } finally {
      await reconcile.terminate('test finished').catch(() => {});
    }
  });

  it('refuses a worker that reports a deployment version without versioning', async () => {
    const refused = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue: uniqueTaskQueue('unversioned'),
      workflowBundle: await testBundle(),
      workerDeploymentOptions: {
        useWorkerVersioning: false,
        version: { deploymentName: 'sideeffect-reporting-only', buildId: 'v1' },
      },
      plugins: [
        new SideEffectPlugin({
          store: new PgStore({ pool: db.pool, schema: db.schema }),
          effects: {},
          ttlMs: 2_000,
        }),
      ],
    }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(InvalidActionError);
    expect((refused as Error).message).toMatch(/useWorkerVersioning/);
  });
});
