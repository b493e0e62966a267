/**
 * A verdict judges one attempt, and the audit trail says how far each name of who decided can be
 * trusted (issue 30, items 1 and 6). The double charge as two operators meet it: attempt 1 never
 * reached the bank and operator A says so; attempt 2 reaches the bank and becomes uncertain;
 * operator B, who checked attempt 1, must not decide attempt 2. Then who decided: the `temporal`
 * CLI's identity (its default and a typed `--identity`), our CLI's (with the OS user), and the
 * database role Postgres authenticated, which no caller of the store chooses. Real Postgres, the
 * real dev server, the `temporal` command in a child process and `sideeffect`'s main in-process
 * (test/support/cli.ts; test/cli/binary.test.ts runs the binary).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import {
  ReconcileWorkflow,
  reconcileWorkflowId,
  type SideEffectOutcome,
  statusQuery,
} from '../../src/workflows/index.js';
import { type GrantedRole, grantedRole } from '../support/roles.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, temporalCliPath } from '../support/temporal.js';
import { type Harness, startHarness, waitFor } from '../temporal/harness.js';
import { cliFixture } from './fixture.js';

const fx = cliFixture('cli_attempt');
const { cli } = fx;

/** Apply attempts per card, and the charges the bank took: what a double charge would show. */
const attempts = new Map<string, number>();
const charges: Array<{ card: string; fence: number }> = [];

const effects = {
  /** Attempt 1 dies before the bank; attempt 2 is charged and its answer lost; any later one charges again. */
  charge: defineEffect({
    resource: (input: { card: string }) => input.card,
    apply: async (input: { card: string }, { lease }) => {
      const attempt = (attempts.get(input.card) ?? 0) + 1;
      attempts.set(input.card, attempt);
      if (attempt === 1) throw new Error('connection reset before the bank saw the charge');
      charges.push({ card: input.card, fence: lease.fence });
      if (attempt === 2) throw new Error('gateway timeout after the bank took the charge');
      return { chargeId: `ch_${attempt}` };
    },
  }),
};

let harness: Harness;
beforeAll(async () => {
  harness = await startHarness('attempt', { store: fx.store, effects, ttlMs: 30_000 });
});
afterAll(async () => {
  await harness?.close();
});

describe('a verdict decides the attempt it names', () => {
  it('two operators: B, who checked attempt 1, cannot decide attempt 2; no third attempt, no second charge', async () => {
    const card = `card-${harness.taskQueue}`;
    const caller = await harness.start('guarded', ['charge', { card }]);
    const key = `${caller.workflowId}/charge`;
    const first = await harness.waitForReconcile(key, 'waiting');
    const fence1 = first.fence!;
    expect(await fx.store.inspect(key)).toMatchObject({ state: 'uncertain', fence: fence1 });
    expect(charges.filter((c) => c.card === card)).toHaveLength(0);

    // Operator A checked attempt 1: nothing at the bank.
    const a = await cli([
      'resolve',
      key,
      '--not-applied',
      '--reason',
      'no charge at the bank',
      '--by',
      'operator-a',
      '--fence',
      String(fence1),
    ]);
    expect(a.code, a.stderr).toBe(0);
    expect(a.stdout).toContain(`for the attempt with fence ${fence1}`);

    // Attempt 2 reaches the bank, and its answer is lost: uncertain again, a new reconcile waits.
    const second = await waitFor(async () => {
      const record = await fx.store.inspect(key);
      return record?.state === 'uncertain' && record.fence > fence1 ? record : undefined;
    }, 'attempt 2 to be uncertain');
    const fence2 = second.fence;
    await waitFor(async () => {
      const status = await harness
        .reconcile(key)
        .query(statusQuery)
        .catch(() => undefined);
      return status?.state === 'waiting' && status.fence === fence2 ? status : undefined;
    }, 'the reconcile of attempt 2 to wait');
    expect(charges.filter((c) => c.card === card)).toEqual([{ card, fence: fence2 }]);

    // Operator B checked attempt 1 too and types the same verdict without a fence: a usage error
    // that says where the fence is and shows the command with it.
    const bare = await cli([
      'resolve',
      key,
      '--not-applied',
      '--reason',
      'no charge at the bank',
      '--by',
      'operator-b',
    ]);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toContain('--fence N is required');
    expect(bare.stderr).toContain(`sideeffect show ${key}`);
    expect(bare.stderr).toContain(
      `sideeffect resolve ${key} --not-applied --reason 'no charge at the bank' --fence N`,
    );

    // `show` prints the attempt to check now and commands that name it.
    const shown = await cli(['show', key]);
    expect(shown.stdout).toContain(`next: check the attempt with fence ${fence2} downstream`);
    expect(shown.stdout).toContain(`sideeffect resolve ${key} --fence ${fence2} --not-applied`);

    // With the fence of what B checked: refused through the workflow's Update, naming attempt 2.
    const stale = await cli([
      'resolve',
      key,
      '--not-applied',
      '--reason',
      'no charge at the bank',
      '--by',
      'operator-b',
      '--fence',
      String(fence1),
      '--json',
    ]);
    expect(stale.code).toBe(1);
    expect(JSON.parse(stale.stdout).error).toMatchObject({
      code: 'STALE_VERDICT',
      fence: fence1,
      currentFence: fence2,
      state: 'uncertain',
    });
    expect(stale.stderr).toContain(
      `the attempt with fence ${fence2} of "${key}" is the uncertain one now; your verdict judged the attempt with fence ${fence1}`,
    );
    expect(stale.stderr).toContain(
      `sideeffect resolve ${key} --not-applied --reason 'no charge at the bank' --fence ${fence2}`,
    );

    // Nothing ran again: attempt 2 still uncertain, one charge, the reconcile still waiting.
    const status = await harness.reconcile(key).query(statusQuery);
    expect(status.state).toBe('waiting');
    expect(status.rejected.at(-1)?.error).toContain(`fence ${fence2}`);
    expect(await fx.store.inspect(key)).toMatchObject({ state: 'uncertain', fence: fence2 });
    expect(attempts.get(card)).toBe(2);

    // --any-attempt decides the attempt uncertain now and says which.
    const any = await cli([
      'resolve',
      key,
      '--any-attempt',
      '--applied',
      '--result',
      '{"chargeId":"ch_2"}',
      '--reason',
      'the charge of attempt 2 is at the bank',
      '--by',
      'operator-b',
    ]);
    expect(any.code, any.stderr).toBe(0);
    expect(any.stderr).toContain(`deciding the attempt with fence ${fence2}`);
    expect(any.stdout).toContain(`for the attempt with fence ${fence2}`);
    expect((await caller.result()) as SideEffectOutcome<unknown>).toMatchObject({
      outcome: 'reconciled',
      result: { chargeId: 'ch_2' },
    });
    expect(attempts.get(card)).toBe(2);
    expect(charges.filter((c) => c.card === card)).toHaveLength(1);
    // Each CLI run is a Node process: about a second alone, much more on a loaded machine.
  }, 240_000);

  it('the store-only path and the batch forms refuse a stale attempt and ask for one', async () => {
    // Attempt 1 decided not applied in the store, attempt 2 uncertain: nobody reconciles it.
    const { key, resource } = await fx.uncertainKey();
    const fence1 = (await fx.store.inspect(key))!.fence;
    await fx.store.resolveUncertain(key, {
      applied: false,
      reason: 'not at the bank',
      fence: fence1,
    });
    await fx.runner.execute({ key, resource }, async () => {
      throw new Error('gateway timeout after the charge was sent');
    });
    const fence2 = (await fx.store.inspect(key))!.fence;
    expect(fence2).toBeGreaterThan(fence1);

    const stale = await cli([
      'resolve',
      key,
      '--not-applied',
      '--reason',
      'not at the bank',
      '--fence',
      String(fence1),
    ]);
    expect(stale.code).toBe(1);
    expect(stale.stderr).toContain(
      `the attempt with fence ${fence2} of "${key}" is the uncertain one now`,
    );
    expect(stale.stderr).toContain(`--fence ${fence2}`);

    const scratch = await mkdtemp(path.join(tmpdir(), 'sideeffect-attempt-'));
    try {
      const file = path.join(scratch, 'verdicts.jsonl');
      // A line without its attempt: refused before anything is sent.
      await writeFile(
        file,
        `${JSON.stringify({ key, applied: false, reason: 'not at the bank' })}\n`,
      );
      const unfenced = await cli(['resolve', '--from-file', file]);
      expect(unfenced.code).toBe(2);
      expect(unfenced.stderr).toContain(`${file}:1: "fence" is required`);
      // A line about attempt 1: refused, naming attempt 2.
      await writeFile(
        file,
        `${JSON.stringify({ key, applied: false, reason: 'not at the bank', fence: fence1 })}\n`,
      );
      const batch = await cli(['resolve', '--from-file', file, '--json']);
      expect(batch.code).toBe(1);
      const report = JSON.parse(batch.stdout);
      expect(report.decided).toEqual([]);
      expect(report.refused).toEqual([
        {
          key,
          code: 'STALE_VERDICT',
          message: expect.stringContaining(
            `the attempt with fence ${fence2} of "${key}" is the uncertain one now`,
          ),
        },
      ]);
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }

    // --resource decides each key's current attempt only when told so, and reports each fence.
    const blind = await cli([
      'resolve',
      '--resource',
      resource,
      '--not-applied',
      '--reason',
      'outage',
    ]);
    expect(blind.code).toBe(2);
    expect(blind.stderr).toContain('--resource needs --any-attempt');
    const any = await cli([
      'resolve',
      '--resource',
      resource,
      '--any-attempt',
      '--store-only',
      '--not-applied',
      '--reason',
      'not in the bank export',
    ]);
    expect(any.code, any.stderr).toBe(0);
    expect(any.stdout).toContain(`${key} (the attempt with fence ${fence2})`);
    expect(await fx.store.inspect(key)).toMatchObject({ state: 'free', fence: fence2 });
  }, 180_000);
});

describe('who decided: declared names beside the authenticated database role', () => {
  const exec = promisify(execFile);
  let operator: GrantedRole;
  let workerRole: string;
  beforeAll(async () => {
    operator = await grantedRole(fx.db, 'operator');
    workerRole = (await fx.db.pool.query<{ who: string }>('select session_user as who')).rows[0]!
      .who;
  });
  afterAll(async () => {
    await operator?.drop();
  });

  async function waitingReconcile() {
    const { key, resource } = await fx.uncertainKey();
    const fence = (await fx.store.inspect(key))!.fence;
    const handle = await harness.client.workflow.start(ReconcileWorkflow, {
      taskQueue: harness.taskQueue,
      workflowId: reconcileWorkflowId(key),
      args: [{ key, resource, reason: 'gateway timeout', fence }],
    });
    await harness.waitForReconcile(key, 'waiting');
    return { key, fence, handle };
  }

  async function temporalSignal(key: string, input: object, identity?: string): Promise<void> {
    await exec(temporalCliPath(), [
      'workflow',
      'signal',
      '--workflow-id',
      reconcileWorkflowId(key),
      '--name',
      'resolve',
      '--input',
      JSON.stringify(input),
      '--address',
      TEMPORAL_ADDRESS,
      '--namespace',
      TEMPORAL_NAMESPACE,
      ...(identity === undefined ? [] : ['--identity', identity]),
    ]);
  }

  it("the temporal CLI's identity is recorded whole; a typed --identity is shown as declared, beside the worker's database role", async () => {
    const plain = await waitingReconcile();
    await temporalSignal(plain.key, {
      applied: false,
      reason: 'not at the bank',
      by: 'ann',
      fence: plain.fence,
    });
    await plain.handle.result();
    const signaled = ((await plain.handle.fetchHistory()).events ?? [])
      .map((event) => event.workflowExecutionSignaledEventAttributes)
      .find((attributes) => attributes?.signalName === 'resolve');
    expect(signaled?.identity).toMatch(/^temporal-cli:[^@\s]+@\S+$/);
    expect((await fx.store.events(plain.key)).at(-1)).toMatchObject({
      from: 'uncertain',
      by: 'ann',
      identity: signaled!.identity,
      dbUser: workerRole,
    });

    const forged = await waitingReconcile();
    await temporalSignal(
      forged.key,
      { applied: false, reason: 'approved', by: 'the CFO', fence: forged.fence },
      'cfo@bank.example',
    );
    await forged.handle.result();
    expect((await fx.store.events(forged.key)).at(-1)).toMatchObject({
      by: 'the CFO',
      identity: 'cfo@bank.example',
      dbUser: workerRole,
    });
    const shown = await cli(['show', forged.key]);
    expect(shown.stdout).toContain(
      `by the CFO (declared in the verdict); sent by: declared: cfo@bank.example (Temporal identity, set by the sender); database user: ${workerRole} (authenticated)`,
    );
  }, 120_000);

  it('our CLI records its OS user and host, through the workflow and in the store alone', async () => {
    const me = `sideeffect-cli:${userInfo().username}@${hostname()}`;
    const viaUpdate = await waitingReconcile();
    const ran = await cli([
      'resolve',
      viaUpdate.key,
      '--not-applied',
      '--reason',
      'checked',
      '--by',
      'ann',
      '--fence',
      String(viaUpdate.fence),
    ]);
    expect(ran.code, ran.stderr).toBe(0);
    const recorded = (await fx.store.events(viaUpdate.key)).at(-1)!;
    expect(recorded.by).toBe('ann');
    expect(recorded.identity!.startsWith(`${me} (pid `)).toBe(true);
    expect(recorded.identity).toMatch(/ \(pid \d+\)$/);
    // Through the workflow, the worker wrote it.
    expect(recorded.dbUser).toBe(workerRole);

    const direct = await fx.uncertainKey();
    const fence = (await fx.store.inspect(direct.key))!.fence;
    const stored = await cli(
      [
        'resolve',
        direct.key,
        '--store-only',
        '--not-applied',
        '--reason',
        'checked',
        '--fence',
        String(fence),
      ],
      { DATABASE_URL: operator.url },
    );
    expect(stored.code, stored.stderr).toBe(0);
    const alone = (await fx.store.events(direct.key)).at(-1)!;
    expect(alone.identity!.startsWith(`${me} (pid `)).toBe(true);
    expect(alone.identity).toMatch(/ \(pid \d+, store only, unchecked\)$/);
    // In the store alone, the CLI's own database role did: the operator the CLI logged in as.
    expect(alone.dbUser).toBe(operator.role);
  }, 120_000);

  it('the operator role may declare any identity through the store function, but not which role it is', async () => {
    const { key } = await fx.uncertainKey();
    const client = new pg.Client({ connectionString: operator.url });
    await client.connect();
    try {
      await client.query(
        `select * from "${fx.db.schema}".resolve_uncertain($1, false, null, 'approved', 'cfo', null, 'cfo@bank.example')`,
        [key],
      );
      // Nor by writing the event row itself: the trigger fills in the session's role.
      await expect(
        client.query(
          `insert into "${fx.db.schema}".events (key, from_state, to_state, fence, reason, actor, at, db_user) values ($1, 'free', 'free', 0, 'x', 'x', now(), 'postgres')`,
          [key],
        ),
      ).rejects.toThrow(/permission denied/);
    } finally {
      await client.end();
    }
    expect((await fx.store.events(key)).at(-1)).toMatchObject({
      by: 'cfo',
      identity: 'cfo@bank.example',
      dbUser: operator.role,
    });
    const shown = await cli(['show', key]);
    expect(shown.stdout).toContain(
      `by cfo (declared in the verdict); sent by: declared: cfo@bank.example (Temporal identity, set by the sender); database user: ${operator.role} (authenticated)`,
    );

    // A role that may insert events (the runtime's) still cannot choose db_user.
    const owner = workerRole;
    await fx.db.pool.query(
      `insert into "${fx.db.schema}".events (key, from_state, to_state, fence, reason, actor, at, db_user) values ($1, 'free', 'free', 0, 'planted', 'x', now(), 'someone-else')`,
      [key],
    );
    expect((await fx.store.events(key)).at(-1)).toMatchObject({ reason: 'planted', dbUser: owner });
  }, 120_000);
});
