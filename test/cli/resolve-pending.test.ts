/**
 * `sideeffect resolve` when no worker can judge the verdict in time: its worker's activity slots
 * busy past `--wait`, Temporal unreachable from the CLI, a namespace without the key's
 * ReconcileWorkflow. The verdict is pending in the store, the CLI says so and exits 3, and the
 * first worker that reads the key runs the effect's result check on it: a result the check
 * refuses never reaches the caller, an accepted one reaches it within a minute, through the
 * worker's sweeper prompting the ReconcileWorkflow.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Client, Connection, type WorkflowHandle, WorkflowNotFoundError } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import type { PendingVerdict } from '../../src/core/verdict.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import {
  type ReconcileStatus,
  reconcileWorkflowId,
  type SideEffectOutcome,
  statusQuery,
} from '../../src/workflows/index.js';
import {
  TEMPORAL_ADDRESS,
  TEMPORAL_NAMESPACE,
  temporalCliPath,
  uniqueTaskQueue,
} from '../support/temporal.js';
import { testBundle, waitFor } from '../temporal/harness.js';
import { cliFixture } from './fixture.js';

const fx = cliFixture('cli_pending');
const { cli } = fx;
/** A namespace that exists on the dev server but holds none of this file's workflows. */
const ELSEWHERE = 'sideeffect-test-elsewhere';

/** First attempt per key: the charge goes out and its answer is lost, so the key is uncertain. */
const attempts = new Map<string, number>();
let busy = 0;
let letGo = () => {};
const slotsReleased = new Promise<void>((resolve) => {
  letGo = resolve;
});
const effects = {
  charge: defineEffect({
    resource: (input: { card: string }) => `card:${input.card}`,
    apply: async (_input: { card: string }, { key }) => {
      const attempt = (attempts.get(key) ?? 0) + 1;
      attempts.set(key, attempt);
      if (attempt === 1) throw new Error('connection reset after the charge was sent');
      return { chargeId: `ch_retry_${attempt}` };
    },
    result: (result: unknown) =>
      typeof (result as { chargeId?: unknown } | null)?.chargeId === 'string' ||
      'chargeId must be a string',
  }),
  /** Holds an activity slot until the test lets go of it (`letGo`). */
  slow: defineEffect({
    resource: (input: { n: number }) => `slow:${input.n}`,
    apply: async () => {
      busy += 1;
      try {
        await slotsReleased;
      } finally {
        busy -= 1;
      }
      return { done: true };
    },
  }),
};

describe('a verdict no worker could judge in time is pending, then judged by the first worker', () => {
  let connection: Connection;
  let native: NativeConnection;
  let client: Client;
  let worker: Worker;
  let running: Promise<void>;
  const taskQueue = uniqueTaskQueue('cli-pending');
  const started: WorkflowHandle[] = [];
  let sequence = 0;

  beforeAll(async () => {
    connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
    native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
    client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
    worker = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue,
      workflowBundle: await testBundle(),
      // Two slots: two long applies leave none for the reconcile's store activities.
      maxConcurrentActivityTaskExecutions: 2,
      plugins: [
        new SideEffectPlugin({
          store: fx.store,
          effects,
          ttlMs: 60_000,
          sweepEveryMs: 2_000,
          client,
        }),
      ],
    });
    running = worker.run();
    // A second namespace, as a person with the wrong --namespace reaches one.
    await promisify(execFile)(temporalCliPath(), [
      'operator',
      'namespace',
      'create',
      '--namespace',
      ELSEWHERE,
      '--address',
      TEMPORAL_ADDRESS,
    ]).catch(() => {});
    const elsewhere = new Client({ connection, namespace: ELSEWHERE });
    await waitFor(
      async () => {
        try {
          await elsewhere.workflow.getHandle('sideeffect-no-such-workflow').describe();
        } catch (error) {
          if (error instanceof WorkflowNotFoundError) return true;
        }
        return undefined;
      },
      `namespace ${ELSEWHERE} to answer`,
      60_000,
    );
  }, 120_000);

  afterAll(async () => {
    letGo();
    for (const handle of started) await handle.terminate('test file finished').catch(() => {});
    worker?.shutdown();
    await running?.catch(() => {});
    await native?.close().catch(() => {});
    await connection?.close().catch(() => {});
  });

  /** A charge whose outcome is uncertain, its caller waiting on `reconcile/<key>`. */
  async function uncertainCharge() {
    const caller = await client.workflow.start('guarded', {
      taskQueue,
      workflowId: `cli-pending-${taskQueue}-${++sequence}`,
      args: ['charge', { card: `c${sequence}` }, { step: 'pay', startToCloseTimeout: '2 minutes' }],
    });
    started.push(caller);
    const key = `${caller.workflowId}/pay`;
    const reconcile = client.workflow.getHandle(reconcileWorkflowId(key));
    started.push(reconcile);
    await waitFor(
      async () => {
        const status = await reconcile.query(statusQuery).catch(() => undefined);
        return status?.state === 'waiting' && status.subscribers.length > 0 ? status : undefined;
      },
      `reconcile/${key} to wait for a person`,
      90_000,
    );
    return { caller, reconcile, key };
  }

  const pending = (key: string): Promise<PendingVerdict[]> => fx.store.pendingVerdicts(key);

  it('busy worker: a verdict pending past --wait is checked by the worker; refused, the key stays uncertain and the caller never sees it', async () => {
    const { caller, reconcile, key } = await uncertainCharge();
    // Both activity slots in long applies: the Update's store activity cannot start.
    for (const n of [1, 2])
      started.push(
        await client.workflow.start('guarded', {
          taskQueue,
          workflowId: `cli-pending-slow-${taskQueue}-${n}`,
          args: ['slow', { n }, { startToCloseTimeout: '2 minutes' }],
        }),
      );
    await waitFor(() => (busy === 2 ? true : undefined), 'both activity slots to be busy');

    const ran = await cli([
      'resolve',
      key,
      '--any-attempt',
      '--applied',
      '--result',
      '{"chargeId":42}',
      '--reason',
      'seen at the bank',
      '--by',
      'ops',
      '--wait',
      '5s',
      '--json',
    ]);
    // Never "resolved": no slot came free within the CLI's wait, so the verdict is pending (3).
    expect(ran.code, ran.stderr).toBe(3);
    expect(ran.stdout).not.toMatch(/"won":\s*true/);
    expect(JSON.parse(ran.stdout)).toMatchObject({ pending: true, timedOut: true, won: false });
    expect(ran.stderr).toContain(
      `temporal workflow signal --workflow-id '${reconcileWorkflowId(key)}' --name recheck`,
    );
    expect(ran.stderr).toContain(`sideeffect show ${key}`);
    expect((await fx.store.inspect(key))?.state).toBe('uncertain');

    // Once a slot is free, the worker judges the pending verdict with the effect's check.
    letGo();
    const judged = await waitFor(
      async () => {
        const [verdict] = await pending(key);
        return verdict && verdict.state !== 'pending' ? verdict : undefined;
      },
      'the pending verdict to be judged',
      120_000,
    );
    expect(judged).toMatchObject({ state: 'refused', by: 'ops' });
    expect(judged.why).toContain('chargeId must be a string');
    expect((await fx.store.inspect(key))?.state).toBe('uncertain');
    expect((await fx.store.events(key)).at(-1)).toMatchObject({
      from: 'uncertain',
      to: 'uncertain',
      reason: expect.stringContaining('verdict refused'),
    });
    const shown = await cli(['show', key]);
    expect(shown.stdout).toMatch(/pending verdicts/);
    expect(shown.stdout).toMatch(/refused/);
    expect((await caller.describe()).status.name).toBe('RUNNING');
    const status: ReconcileStatus = await reconcile.query(statusQuery);
    expect(status.state).toBe('waiting');
    expect(status.rejected.map((r) => r.error).join('\n')).toContain('chargeId must be a string');

    // A later correct verdict decides, and the caller gets exactly that result.
    const good = await cli([
      'resolve',
      key,
      '--any-attempt',
      '--applied',
      '--result',
      '{"chargeId":"ch_1"}',
      '--reason',
      'seen at the bank, id this time',
      '--wait',
      '60s',
    ]);
    expect(good.code, good.stderr).toBe(0);
    expect((await caller.result()) as SideEffectOutcome<unknown>).toEqual({
      outcome: 'reconciled',
      result: { chargeId: 'ch_1' },
      key,
    });
  }, 300_000);

  it('Temporal unreachable from the CLI: the pending verdict reaches the waiting caller within a minute', async () => {
    const { caller, key } = await uncertainCharge();
    const ran = await cli([
      'resolve',
      key,
      '--any-attempt',
      '--applied',
      '--result',
      '{"chargeId":"ch_2"}',
      '--reason',
      'seen at the bank',
      '--address',
      '127.0.0.1:1',
    ]);
    const pendingAt = Date.now();
    expect(ran.code, ran.stderr).toBe(3);
    expect(ran.stderr).toMatch(/recording the verdict in the store as a pending verdict/);
    expect(ran.stdout).toMatch(/pending verdict #\d+/);
    expect((await fx.store.inspect(key))?.state).toBe('uncertain');
    const outcome = (await caller.result()) as SideEffectOutcome<unknown>;
    expect(outcome).toEqual({ outcome: 'reconciled', result: { chargeId: 'ch_2' }, key });
    expect(Date.now() - pendingAt).toBeLessThan(60_000);
    expect((await pending(key)).map((v) => v.state)).toEqual(['accepted']);
  }, 240_000);

  it("a namespace without the key's ReconcileWorkflow: says so, exits non-zero, and the verdict still reaches the real one", async () => {
    const { caller, key } = await uncertainCharge();
    const ran = await cli([
      'resolve',
      key,
      '--any-attempt',
      '--not-applied',
      '--reason',
      'not at the bank',
      '--namespace',
      ELSEWHERE,
    ]);
    const pendingAt = Date.now();
    expect(ran.code, ran.stdout).toBe(3);
    expect(ran.stdout).toContain(
      `no ReconcileWorkflow ${reconcileWorkflowId(key)} in namespace ${ELSEWHERE}`,
    );
    expect(ran.stdout).not.toMatch(/via the store/);
    // The prompt it prints does not repeat the namespace that had no such workflow.
    expect(ran.stdout).toContain('--name recheck --namespace <the namespace its workers poll>');
    expect(ran.stdout).not.toContain(`--namespace ${ELSEWHERE}`);
    // Judged by this worker (in the right namespace) once its sweeper prompts the reconcile.
    const outcome = (await caller.result()) as SideEffectOutcome<unknown>;
    expect(outcome).toMatchObject({ outcome: 'applied', result: { chargeId: 'ch_retry_2' } });
    expect(Date.now() - pendingAt).toBeLessThan(60_000);
  }, 240_000);
});
