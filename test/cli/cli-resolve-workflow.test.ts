/**
 * `sideeffect resolve` where a ReconcileWorkflow waits: the CLI's Update racing the UI's signal,
 * the effect's result check on every path, a workflow no worker serves (--wait), and the audit
 * trail's Temporal identities. Shared setup: fixture.ts, and a worker on this file's task queue.
 */
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, WorkflowUpdateFailedError } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import {
  ReconcileWorkflow,
  reconcileWorkflowId,
  resolveSignal,
  resolveUpdate,
  statusQuery,
} from '../../src/workflows/index.js';
import { TEMPORAL_ADDRESS, uniqueTaskQueue } from '../support/temporal.js';
import { type Harness, startHarness, testBundle } from '../temporal/harness.js';
import { cliFixture } from './fixture.js';

const fx = cliFixture('cli_workflow');
const { cli, uncertainKey } = fx;

/** A hand-made Standard Schema: what zod or valibot hand over, without depending on either. */
const receipt = {
  '~standard': {
    version: 1 as const,
    vendor: 'test',
    validate: (value: unknown) =>
      typeof value === 'object' &&
      value !== null &&
      typeof (value as { id?: unknown }).id === 'string'
        ? { value }
        : { issues: [{ message: 'expected a string', path: ['id'] }] },
  },
};
const effects = {
  charge: defineEffect({
    resource: (input: { card: string }) => input.card,
    apply: async () => ({ id: 'never-run' }),
    result: receipt,
  }),
  notify: defineEffect({
    resource: (input: { to: string }) => input.to,
    apply: async () => null,
    result: 'void',
  }),
};

describe('sideeffect resolve racing the UI signal', () => {
  let harness: Harness;
  beforeAll(async () => {
    harness = await startHarness('cli', { store: fx.store, effects, ttlMs: 30_000 });
  });
  afterAll(async () => {
    await harness?.close();
  });

  async function waitingReconcile(effect?: keyof typeof effects) {
    const { key, resource } = await uncertainKey();
    const handle = await harness.client.workflow.start(ReconcileWorkflow, {
      taskQueue: harness.taskQueue,
      workflowId: reconcileWorkflowId(key),
      args: [{ key, resource, reason: 'gateway timeout', ...(effect ? { effect } : {}) }],
    });
    await harness.waitForReconcile(key, 'waiting');
    return { key, handle };
  }

  it('the UI signal first: the CLI is told who won and exits 1', async () => {
    const { key, handle } = await waitingReconcile();
    await handle.signal(resolveSignal, {
      applied: false,
      reason: 'not in the bank',
      by: 'ui:bob',
      attempt: 'any',
    });
    const resolution = await handle.result();
    expect(resolution).toMatchObject({ applied: false, by: 'ui:bob', decidedBy: 'signal' });
    const ran = await cli([
      'resolve',
      '--any-attempt',
      key,
      '--applied',
      '--result',
      'null',
      '--reason',
      'I think it went through',
      '--json',
    ]);
    expect(ran.code).toBe(1);
    expect(JSON.parse(ran.stdout)).toMatchObject({ won: false, via: 'store' });
    expect((await fx.store.inspect(key))?.state).toBe('free');
  });

  it('the CLI first: it wins through the ReconcileWorkflow, the later signal changes nothing', async () => {
    const { key, handle } = await waitingReconcile();
    const ran = await cli([
      'resolve',
      '--any-attempt',
      key,
      '--applied',
      '--reason',
      'seen in the bank',
      '--result',
      '{"id":"ch_7"}',
      '--by',
      'ann',
    ]);
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toMatch(/via its ReconcileWorkflow/);
    // The UI's sender is told by Temporal itself: the workflow has already completed.
    await expect(
      handle.signal(resolveSignal, { applied: false, reason: 'late', by: 'ui:bob' }),
    ).rejects.toThrow(/completed|not found/i);
    expect(await handle.result()).toMatchObject({
      applied: true,
      result: { id: 'ch_7' },
      by: 'ann',
      decidedBy: 'update',
    });
    expect((await fx.store.inspect(key))?.state).toBe('done');
  });

  it('both at once: exactly one wins and the store agrees with the workflow', async () => {
    const { key, handle } = await waitingReconcile();
    const [ran, signalled] = await Promise.all([
      cli([
        'resolve',
        '--any-attempt',
        key,
        '--applied',
        '--result',
        'null',
        '--reason',
        'cli verdict',
        '--by',
        'ann',
        '--json',
      ]),
      handle
        .signal(resolveSignal, {
          applied: false,
          reason: 'ui verdict',
          by: 'ui:bob',
          attempt: 'any',
        })
        .then(
          () => true,
          () => false,
        ),
    ]);
    const resolution = await handle.result();
    const report = JSON.parse(ran.stdout);
    expect(report.won).toBe(resolution.decidedBy === 'update');
    // A signal that reached the workflow after the CLI's verdict is listed as refused, not lost.
    const { rejected } = await handle.query(statusQuery);
    if (report.won && signalled) expect(rejected[0]?.error).toMatch(/^already decided by ann/);
    if (!report.won) expect(rejected).toEqual([]);
    expect(ran.code).toBe(report.won ? 0 : 1);
    expect((await fx.store.inspect(key))?.state).toBe(resolution.applied ? 'done' : 'free');
  });

  it("a verdict whose result fails the effect's result check is refused by the CLI, --from-file, the signal and the Update, before anything is recorded", async () => {
    const { key, handle } = await waitingReconcile('charge');
    const cliRun = await cli([
      'resolve',
      '--any-attempt',
      key,
      '--applied',
      '--result',
      '{"id": 7}',
      '--reason',
      'seen',
    ]);
    expect(cliRun.code).toBe(1);
    expect(cliRun.stderr).toMatch(
      /result refused by effect "charge": id: expected a string; nothing was recorded/,
    );

    const file = path.join(tmpdir(), `verdicts-${process.pid}-${Date.now()}.jsonl`);
    await writeFile(file, `${JSON.stringify({ key, applied: true, reason: 'seen' })}\n`);
    const batch = await cli(['resolve', '--any-attempt', '--from-file', file, '--json']);
    expect(batch.code).toBe(1);
    expect(JSON.parse(batch.stdout).refused).toMatchObject([
      {
        key,
        code: 'INVALID_ACTION',
        message: expect.stringContaining('result refused by effect "charge"'),
      },
    ]);

    await handle.signal(resolveSignal, {
      applied: true,
      result: null,
      reason: 'seen',
      by: 'ui',
      attempt: 'any',
    });
    await expect(
      handle.executeUpdate(resolveUpdate, {
        args: [{ applied: true, result: { id: ['x'] }, reason: 'seen', by: 'api', attempt: 'any' }],
      }),
    ).rejects.toThrow(WorkflowUpdateFailedError);
    const { rejected, state } = await handle.query(statusQuery);
    expect(state).toBe('waiting');
    expect(rejected.map((r) => r.error)).toEqual([
      expect.stringContaining('result refused by effect "charge"'),
      expect.stringContaining('result refused by effect "charge"'),
      expect.stringContaining('result refused by effect "charge"'),
      expect.stringContaining('result refused by effect "charge"'),
    ]);
    expect((await fx.store.inspect(key))?.state).toBe('uncertain');

    const good = await cli([
      'resolve',
      '--any-attempt',
      key,
      '--applied',
      '--result',
      '{"id": "ch_9"}',
      '--reason',
      'seen',
    ]);
    expect(good.code, good.stderr).toBe(0);
    expect(await handle.result()).toMatchObject({ applied: true, result: { id: 'ch_9' } });
  });

  it('a void effect takes only a null result', async () => {
    const { key, handle } = await waitingReconcile('notify');
    const refused = await cli([
      'resolve',
      '--any-attempt',
      key,
      '--applied',
      '--result',
      '{"sent": true}',
      '--reason',
      'seen',
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/returns nothing/);
    const ran = await cli([
      'resolve',
      '--any-attempt',
      key,
      '--applied',
      '--result',
      'null',
      '--reason',
      'seen',
    ]);
    expect(ran.code, ran.stderr).toBe(0);
    expect(await handle.result()).toMatchObject({ applied: true, result: null });
  });

  it('with no worker polling, resolve gives up after --wait, holds the verdict in the store and says so; a worker that comes back decides it', async () => {
    const { key, resource } = await uncertainKey();
    const idle = uniqueTaskQueue('cli-idle');
    const handle = await harness.client.workflow.start(ReconcileWorkflow, {
      taskQueue: idle,
      workflowId: reconcileWorkflowId(key),
      args: [{ key, resource, reason: 'gateway timeout' }],
    });
    try {
      const ran = await cli([
        'resolve',
        '--any-attempt',
        key,
        '--not-applied',
        '--reason',
        'not in the bank',
        '--by',
        'ann',
        '--wait',
        '2s',
        '--json',
      ]);
      expect(ran.code, ran.stderr).toBe(3);
      const report = JSON.parse(ran.stdout);
      expect(report).toMatchObject({ won: false, pending: true, timedOut: true, applied: false });
      expect(report.message).toMatch(/did not answer within 2s/);
      expect(report.message).toMatch(/recorded in the store as pending verdict #\d+/);
      expect(report.message).toMatch(/--name recheck/);
      expect(ran.stderr).toMatch(/did not answer within 2s/);
      expect((await fx.store.inspect(key))?.state).toBe('uncertain');

      // A worker comes back: the ReconcileWorkflow ends on the store's verdict.
      const connection = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
      const worker = await Worker.create({
        connection,
        taskQueue: idle,
        workflowBundle: await testBundle(),
        plugins: [
          new SideEffectPlugin({
            store: fx.store,
            effects: {},
            ttlMs: 30_000,
            sweepEveryMs: 0,
            client: harness.client,
          }),
        ],
      });
      const running = worker.run();
      try {
        expect(await handle.result()).toMatchObject({ applied: false });
      } finally {
        worker.shutdown();
        await running;
        await connection.close();
      }
      expect((await fx.store.inspect(key))?.state).toBe('free');
      expect(
        (await fx.store.events(key)).filter((e) => e.from === 'uncertain' && e.to !== 'uncertain'),
      ).toHaveLength(1);
      expect((await fx.store.pendingVerdicts(key)).map((v) => v.state)).toEqual(['accepted']);
    } finally {
      await handle.terminate('test finished').catch(() => {});
    }
  }, 60_000);

  it('the audit trail records the Temporal identity that delivered each verdict beside its by; show prints it', async () => {
    // A signal from a console whose Temporal identity differs from the name it types.
    const signalled = await waitingReconcile();
    const consoleClient = new Client({
      connection: harness.client.connection,
      identity: 'ops-console@example.com',
    });
    await consoleClient.workflow
      .getHandle(reconcileWorkflowId(signalled.key))
      .signal(resolveSignal, {
        applied: false,
        reason: 'not in the bank',
        by: 'you',
        attempt: 'any',
      });
    await signalled.handle.result();
    expect((await fx.store.events(signalled.key)).at(-1)).toMatchObject({
      from: 'uncertain',
      by: 'you',
      identity: 'ops-console@example.com',
    });
    const shown = await cli(['show', signalled.key]);
    expect(shown.stdout).toMatch(/you\s+not in the bank/);
    expect(shown.stdout).toContain('sent by: declared: ops-console@example.com');

    // The CLI's Update: the CLI process's client identity.
    const updated = await waitingReconcile();
    const ran = await cli([
      'resolve',
      '--any-attempt',
      updated.key,
      '--not-applied',
      '--reason',
      'checked',
      '--by',
      'ann',
    ]);
    expect(ran.code, ran.stderr).toBe(0);
    const viaUpdate = (await fx.store.events(updated.key)).at(-1);
    expect(viaUpdate).toMatchObject({
      by: 'ann',
      identity: expect.stringMatching(/^sideeffect-cli:.+@.+ \(pid \d+\)$/),
    });

    // The store-only path names itself.
    const direct = await uncertainKey();
    expect(
      (
        await cli([
          'resolve',
          '--any-attempt',
          direct.key,
          '--store-only',
          '--not-applied',
          '--reason',
          'checked',
        ])
      ).code,
    ).toBe(0);
    expect((await fx.store.events(direct.key)).at(-1)?.identity).toMatch(
      /^sideeffect-cli:.+@.+ \(pid \d+, store only, unchecked\)$/,
    );
    const json = JSON.parse((await cli(['show', direct.key, '--json'])).stdout);
    expect(json.events.at(-1).identity).toMatch(/store only, unchecked\)$/);
  });
});
