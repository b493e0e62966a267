/**
 * A verdict pending in the store is seen where people decide, and never judged behind their back.
 * The episode: bob cannot reach Temporal, so his "not applied" for attempt 1 is pending in the
 * store; carol, who found the charge, sends "applied" through the workflow. It used to make the
 * worker judge bob's first: the key was freed and the charge ran again (2 charges). Now carol is
 * refused with bob's verdict named (who, when, what) and the command that withdraws it; she
 * withdraws it, sends hers again, and the caller returns her charge: one charge.
 * And a pending verdict no worker can judge (a Runner key, a reconcile that knows no effect)
 * shows in the reconcile's `status` and details, in `show` and `list`, and reads `late` once the
 * key is decided.
 */
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import {
  type ReconcileStatus,
  recheckSignal,
  reconcileWorkflowId,
  type SideEffectOutcome,
  statusQuery,
} from '../../src/workflows/index.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { testBundle, waitFor } from '../temporal/harness.js';
import { cliFixture } from './fixture.js';

const fx = cliFixture('cli_behind_pending');
const { cli } = fx;
const UNREACHABLE = ['--address', '127.0.0.1:1'];

/** Charges at the bank, per key: the first attempt's answer is lost, so the key is uncertain. */
const charges = new Map<string, number>();
const effects = {
  charge: defineEffect({
    resource: (input: { card: string }) => `card:${input.card}`,
    apply: async (_input: { card: string }, { key }) => {
      const n = (charges.get(key) ?? 0) + 1;
      charges.set(key, n);
      if (n === 1) throw new Error('connection reset after the charge was sent');
      return { chargeId: `ch_${n}` };
    },
    result: (result: unknown) =>
      typeof (result as { chargeId?: unknown } | null)?.chargeId === 'string' ||
      'chargeId must be a string',
  }),
};

describe('a pending verdict is seen where people decide', () => {
  let connection: Connection;
  let native: NativeConnection;
  let client: Client;
  let worker: Worker;
  let running: Promise<void>;
  const taskQueue = uniqueTaskQueue('cli-behind-pending');
  const started: WorkflowHandle[] = [];

  beforeAll(async () => {
    connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
    native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
    client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
    worker = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue,
      workflowBundle: await testBundle(),
      plugins: [
        new SideEffectPlugin({
          store: fx.store,
          effects,
          ttlMs: 60_000,
          // No sweeper prompt during a test: the race is between two people.
          sweepEveryMs: 600_000,
          client,
        }),
      ],
    });
    running = worker.run();
  }, 120_000);

  afterAll(async () => {
    for (const handle of started) await handle.terminate('test file finished').catch(() => {});
    worker?.shutdown();
    await running?.catch(() => {});
    await native?.close().catch(() => {});
    await connection?.close().catch(() => {});
  });

  it("carol's verdict behind bob's pending one is refused, naming it; withdrawn, hers decides: one charge", async () => {
    const caller = await client.workflow.start('guarded', {
      taskQueue,
      workflowId: `behind-pending-${taskQueue}`,
      args: ['charge', { card: 'c1' }, { step: 'pay', startToCloseTimeout: '2 minutes' }],
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

    const bob = await cli([
      'resolve',
      key,
      '--any-attempt',
      '--not-applied',
      '--reason',
      'not in the bank export',
      '--by',
      'bob',
      ...UNREACHABLE,
    ]);
    expect(bob.code, bob.stderr).toBe(3);
    const [pending] = await fx.store.pendingVerdicts(key);
    expect(pending).toMatchObject({ state: 'pending', by: 'bob', fence: 1 });

    const carolArgs = [
      'resolve',
      key,
      '--fence',
      '1',
      '--applied',
      '--result',
      '{"chargeId":"ch_1"}',
      '--reason',
      'found ch_1 at the bank',
      '--by',
      'carol',
    ];
    const refused = await cli(carolArgs);
    expect(refused.code, refused.stdout + refused.stderr).toBe(1);
    const told = refused.stdout + refused.stderr;
    expect(told).toContain(`pending verdict #${pending!.id} on attempt 1`);
    expect(told).toContain('not applied, by bob at');
    expect(told).toContain('not in the bank export');
    expect(told).toContain(`sideeffect withdraw '${key}' --verdict ${pending!.id} --reason TEXT`);
    // Nothing was decided: the key waits, bob's verdict waits, nothing was charged again.
    expect((await fx.store.inspect(key))?.state).toBe('uncertain');
    expect((await fx.store.pendingVerdicts(key))[0]?.state).toBe('pending');
    expect(charges.get(key)).toBe(1);
    const status = await reconcile.query(statusQuery);
    expect(status.rejected.at(-1)?.error).toContain(`pending verdict #${pending!.id}`);

    // `list` and `show` show it too.
    const listed = await cli(['list', '--state', 'uncertain', '-o', 'json']);
    expect(JSON.parse(listed.stdout)).toContainEqual(
      expect.objectContaining({ key, pendingVerdicts: 1 }),
    );
    const shown = await cli(['show', key]);
    expect(shown.stdout).toContain('pending verdicts');
    expect(shown.stdout).toContain(`sideeffect withdraw ${key} --verdict ID`);

    const withdrawn = await cli([
      'withdraw',
      key,
      '--verdict',
      String(pending!.id),
      '--reason',
      'carol found ch_1 at the bank',
      '--by',
      'carol',
    ]);
    expect(withdrawn.code, withdrawn.stderr).toBe(0);
    expect(withdrawn.stdout).toContain(`withdrew pending verdict #${pending!.id}`);
    const again = await cli(['withdraw', key, '--verdict', String(pending!.id), '--reason', 'x']);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('withdrawn already');

    const decided = await cli(carolArgs);
    expect(decided.code, decided.stdout + decided.stderr).toBe(0);
    const outcome = (await caller.result()) as SideEffectOutcome<unknown>;
    expect(outcome).toEqual({ outcome: 'reconciled', result: { chargeId: 'ch_1' }, key });
    expect(charges.get(key)).toBe(1);
    expect(await fx.store.pendingVerdicts(key)).toEqual([
      expect.objectContaining({ state: 'withdrawn', why: expect.stringContaining('carol') }),
    ]);
    const events = await fx.store.events(key);
    expect(events).toContainEqual(
      expect.objectContaining({ by: 'carol', reason: expect.stringContaining('withdrawn') }),
    );
  }, 300_000);

  it('a pending verdict no worker can judge shows in status and details, then reads late once decided', async () => {
    // A Runner key: its reconcile knows no effect, so an applied verdict cannot be checked.
    const { key, resource } = await fx.uncertainKey();
    const reconcile = await client.workflow.start('ReconcileWorkflow', {
      taskQueue,
      workflowId: reconcileWorkflowId(key),
      args: [{ key, resource, reason: 'lost', fence: 1 }],
    });
    started.push(reconcile);
    const bob = await cli([
      'resolve',
      key,
      '--fence',
      '1',
      '--applied',
      '--result',
      '{"ok":true}',
      '--reason',
      'seen downstream',
      '--by',
      'bob',
      ...UNREACHABLE,
    ]);
    expect(bob.code, bob.stderr).toBe(3);
    const [pending] = await fx.store.pendingVerdicts(key);
    await reconcile.signal(recheckSignal);
    const status = await waitFor(
      async () => {
        const now: ReconcileStatus = await reconcile.query(statusQuery);
        return now.pending?.length ? now : undefined;
      },
      'the status query to list the pending verdict',
      60_000,
    );
    expect(status.pending).toEqual([
      expect.objectContaining({ id: pending!.id, by: 'bob', applied: true, fence: 1 }),
    ]);
    const metadata = (await reconcile.query('__temporal_workflow_metadata')) as {
      currentDetails?: string;
    };
    expect(metadata.currentDetails).toContain('**Pending verdicts**');
    expect(metadata.currentDetails).toContain(`#${pending!.id} on attempt 1: applied, by bob`);

    await fx.store.resolveUncertain(key, { applied: false, reason: 'decided elsewhere', fence: 1 });
    expect(await fx.store.pendingVerdicts(key)).toEqual([
      expect.objectContaining({ state: 'late', why: expect.stringContaining('decided before') }),
    ]);
    const shown = await cli(['show', key]);
    expect(shown.stdout).toMatch(/#\d+\s+\S+\s+late/);
  }, 300_000);
});
