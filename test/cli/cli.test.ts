import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, WorkflowUpdateFailedError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { environment, main } from '../../src/cli/main.js';
import { encodeJson, Runner } from '../../src/core/index.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { createWorker } from '../../src/worker/index.js';
import {
  ReconcileWorkflow,
  reconcileWorkflowId,
  resolveSignal,
  resolveUpdate,
  statusQuery,
} from '../../src/workflows/index.js';
import { type CliRun, runCli } from '../support/cli.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { type GrantedRole, grantedRole } from '../support/roles.js';
import { uniqueTaskQueue } from '../support/temporal.js';
import { type Harness, startHarness, testBundle } from '../temporal/harness.js';

let db: FreshSchema;
let store: PgStore;
let runner: Runner;
let harness: Harness;
let n = 0;

/** An operator role (docs/database-roles.md) with exactly its grants on this file's schema. */
let operator: GrantedRole;

/** The CLI against this file's schema, as the operator role unless told otherwise. */
function cli(args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  return runCli(args, { DATABASE_URL: operator.url, SIDEEFFECT_SCHEMA: db.schema, ...env });
}

/** `migrate` and `purge` are the owner's and the runtime role's, not the operator's. */
const asOwner = { DATABASE_URL: databaseUrl() };

async function uncertainKey(): Promise<{ key: string; resource: string }> {
  n += 1;
  const action = { key: `order-${n}/charge`, resource: `card-${n}` };
  const execution = await runner.execute(action, async () => {
    throw new Error('gateway timeout after the charge was sent');
  });
  expect(execution.outcome).toBe('uncertain');
  return action;
}

beforeAll(async () => {
  db = await freshSchema('cli');
  await migrate(db.pool, { schema: db.schema });
  operator = await grantedRole(db, 'operator');
  store = new PgStore({ pool: db.pool, schema: db.schema });
  runner = new Runner(store, { ttlMs: 30_000 });
});

afterAll(async () => {
  await harness?.close();
  await db.drop();
  await operator?.drop();
});

describe('sideeffect CLI against Postgres', () => {
  it('migrate applies once, then says it is up to date', async () => {
    const empty = await freshSchema('cli_migrate');
    try {
      const first = await cli(['migrate'], { ...asOwner, SIDEEFFECT_SCHEMA: empty.schema });
      expect(first).toMatchObject({ code: 0 });
      expect(first.stdout).toMatch(/applied 0001_init/);
      const again = await cli(['migrate', '--json'], {
        ...asOwner,
        SIDEEFFECT_SCHEMA: empty.schema,
      });
      expect(again.code).toBe(0);
      expect(JSON.parse(again.stdout)).toEqual({ schema: empty.schema, applied: [] });
    } finally {
      await empty.drop();
    }
  });

  it('list, show and their --json forms', async () => {
    const done = { key: 'order-list/charge', resource: 'card-list' };
    await runner.execute(done, async () => encodeJson({ id: 'ch_1' }));
    const doubtful = await uncertainKey();

    const list = await cli(['list']);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^STATE\s+FENCE\s+UPDATED\s+KEY/m);
    expect(list.stdout).toContain(done.key);
    expect(list.stdout).toContain(doubtful.key);

    const onlyUncertain = JSON.parse(
      (await cli(['list', '--state', 'uncertain', '--json'])).stdout,
    );
    expect(onlyUncertain.map((r: { key: string }) => r.key)).toEqual([doubtful.key]);

    const show = await cli(['show', done.key]);
    expect(show.code).toBe(0);
    expect(show.stdout).toMatch(/state:\s+done/);
    expect(show.stdout).toMatch(/result:\s+\{"id":"ch_1"\}/);
    expect(show.stdout).toMatch(/free -> applying/);
    expect(show.stdout).toMatch(/applying -> done/);

    const shown = JSON.parse((await cli(['show', doubtful.key, '--json'])).stdout);
    expect(shown).toMatchObject({
      key: doubtful.key,
      state: 'uncertain',
      reason: expect.stringMatching(/gateway timeout/),
    });
    expect(shown.events.map((e: { to: string }) => e.to)).toEqual(['applying', 'uncertain']);
    expect((await cli(['show', doubtful.key])).stdout).toMatch(/next: sideeffect resolve/);
  });

  it('resolve without a ReconcileWorkflow goes to the store; the second verdict is told it lost', async () => {
    const { key } = await uncertainKey();
    const first = await cli([
      'resolve',
      key,
      '--applied',
      '--reason',
      'seen in the bank',
      '--result',
      '{"id":"ch_9"}',
      '--by',
      'ann',
    ]);
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/resolved: applied/);
    const record = await store.inspect(key);
    expect(record?.state).toBe('done');
    expect(JSON.parse(new TextDecoder().decode(record!.result!.payload))).toEqual({ id: 'ch_9' });

    const second = await cli([
      'resolve',
      key,
      '--not-applied',
      '--reason',
      'not in the bank',
      '--json',
    ]);
    expect(second.code).toBe(1);
    expect(JSON.parse(second.stdout)).toMatchObject({
      won: false,
      applied: true,
      result: { id: 'ch_9' },
    });
    expect((await store.inspect(key))?.state).toBe('done');
  });

  it('resolve of a key that is not uncertain is refused and changes nothing', async () => {
    const free = { key: 'order-free/charge', resource: 'card-free' };
    const lease = await store.acquire(free, 30_000);
    if (lease.outcome === 'granted') await store.release(free, lease.lease);
    const refused = await cli(['resolve', free.key, '--not-applied', '--reason', 'x']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/not uncertain \(state: free\)/);
    const unknown = await cli(['resolve', 'never-seen', '--not-applied', '--reason', 'x']);
    expect(unknown.code).toBe(1);
    expect((await store.inspect(free.key))?.state).toBe('free');
  });

  it('resolve --fence of an earlier episode is refused (exit 1) and the key stays uncertain', async () => {
    const action = await uncertainKey();
    const episode = (await store.inspect(action.key))!.fence;
    expect(
      (
        await cli([
          'resolve',
          action.key,
          '--not-applied',
          '--reason',
          'B checked',
          '--fence',
          String(episode),
        ])
      ).code,
    ).toBe(0);
    // Re-applied, its response lost again: episode 2.
    const again = await runner.execute(action, async () => {
      throw new Error('gateway timeout again');
    });
    expect(again.outcome).toBe('uncertain');
    const late = await cli([
      'resolve',
      action.key,
      '--not-applied',
      '--reason',
      'A checked episode 1',
      '--fence',
      String(episode),
      '--json',
    ]);
    expect(late.code).toBe(1);
    expect(late.stderr).toMatch(/judges episode \(fence\) 1, but the key is at fence 2/);
    expect(JSON.parse(late.stdout).error.code).toBe('STALE_VERDICT');
    expect((await store.inspect(action.key))?.state).toBe('uncertain');
    const bad = await cli([
      'resolve',
      action.key,
      '--not-applied',
      '--reason',
      'x',
      '--fence',
      '0',
    ]);
    expect(bad.code).toBe(2);
  });

  it('show of an unknown key exits 1', async () => {
    const missing = await cli(['show', 'nope']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no key "nope"/);
  });

  it('purge deletes old done keys only', async () => {
    const doubtful = await uncertainKey();
    const done = { key: 'order-purge/charge', resource: 'card-purge' };
    await runner.execute(done, async () => encodeJson('ok'));
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    // No terminal to ask (as in cron and CI): refused without --yes, nothing deleted.
    const unasked = await cli(['purge', '--older-than', '1s', '--force'], asOwner);
    expect(unasked.code).toBe(2);
    expect(unasked.stderr).toMatch(/purge needs --yes when stdin or stdout is not a terminal/);
    // Below the floor (7 days) without --force: refused, nothing deleted.
    const young = await cli(['purge', '--older-than', '1s', '--yes', '--json'], asOwner);
    expect(young.code).toBe(1);
    expect(JSON.parse(young.stdout).error.code).toBe('PURGE_BELOW_FLOOR');
    expect(young.stderr).toMatch(/--force/);
    expect((await store.inspect(done.key))?.state).toBe('done');
    // On a terminal, a question; anything but yes deletes nothing.
    const env = {
      ...environment(),
      database: { connectionString: databaseUrl() },
      schema: db.schema,
    };
    const asked: string[] = [];
    const answer = (yes: boolean) => async (question: string) => {
      asked.push(question);
      return yes;
    };
    const silent = { out: () => {}, err: () => {} };
    const args = ['purge', '--older-than', '1s', '--force'];
    expect(await main(args, { ...silent, confirm: answer(false) }, env)).toBe(1);
    expect(asked[0]).toMatch(/^purge done keys older than 1 s from schema .*\[y\/N\] $/);
    expect((await store.inspect(done.key))?.state).toBe('done');
    expect(await main(args, { ...silent, confirm: answer(true) }, env)).toBe(0);
    expect(await store.inspect(done.key)).toBeUndefined();
    const purged = await cli(
      ['purge', '--older-than', '1s', '--yes', '--force', '--json'],
      asOwner,
    );
    expect(purged.code).toBe(0);
    expect(JSON.parse(purged.stdout).purged).toBe(0);
    expect((await store.inspect(doubtful.key))?.state).toBe('uncertain');
  });

  it('bad arguments: a clear message, the help, exit code 2, nothing touched', async () => {
    const before = await store.list({ limit: 1000 });
    for (const args of [
      ['frobnicate'],
      ['resolve', 'k', '--applied'],
      ['list', '--state', 'bogus'],
      ['purge', '--older-than', 'soon'],
    ]) {
      const ran = await cli(args);
      expect(ran.code, args.join(' ')).toBe(2);
      expect(ran.stderr).toMatch(/^sideeffect: /);
      expect(ran.stderr).toMatch(/Usage: sideeffect/);
    }
    expect(await store.list({ limit: 1000 })).toEqual(before);
  });

  it('--help on every command', async () => {
    for (const args of [['--help'], ['resolve', '--help'], ['purge', '-h']]) {
      const ran = await cli(args);
      expect(ran.code).toBe(0);
      expect(ran.stdout).toMatch(/Usage: sideeffect/);
    }
  });

  it('an unreachable database exits 3 with what failed', async () => {
    const ran = await cli(['list'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none' });
    expect(ran.code).toBe(3);
    expect(ran.stderr).toMatch(/sideeffect: .*(ECONNREFUSED|connect)/);
  });
});

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
describe('one way to find the database, and the options the temporal CLI has', () => {
  const url = () => new URL(databaseUrl());
  /** The same database as DATABASE_URL, told through pg's own PG* variables only. */
  const pgVariables = () => ({
    DATABASE_URL: '',
    PGHOST: url().hostname,
    PGPORT: url().port || '5432',
    PGUSER: decodeURIComponent(url().username),
    PGPASSWORD: decodeURIComponent(url().password),
    PGDATABASE: url().pathname.slice(1),
  });
  const unreachable = 'postgres://postgres@127.0.0.1:1/none';

  it('without DATABASE_URL the PG* variables name the database, as pg reads them for a worker', async () => {
    const { key } = await uncertainKey();
    const ran = await cli(['list', '-o', 'json'], pgVariables());
    expect(ran.code, ran.stderr).toBe(0);
    expect(JSON.parse(ran.stdout).map((r: { key: string }) => r.key)).toContain(key);
    // PGDATABASE is really what was read: another name is another database.
    const other = await cli(['list'], { ...pgVariables(), PGDATABASE: 'sideeffect_no_such_db' });
    expect(other.code).toBe(3);
    expect(other.stderr).toMatch(/database "sideeffect_no_such_db" does not exist/);
  });

  it('DATABASE_URL wins over PG*, and --connection over both', async () => {
    const { key } = await uncertainKey();
    const urlWins = await cli(['show', key], {
      ...pgVariables(),
      DATABASE_URL: databaseUrl(),
      PGDATABASE: 'sideeffect_no_such_db',
    });
    expect(urlWins.code, urlWins.stderr).toBe(0);
    const flagWins = await cli(['show', key, '--connection', databaseUrl()], {
      DATABASE_URL: unreachable,
    });
    expect(flagWins.code, flagWins.stderr).toBe(0);
    expect(flagWins.stdout).toMatch(/state:\s+uncertain/);
  });

  it('--schema wins over SIDEEFFECT_SCHEMA', async () => {
    const { key } = await uncertainKey();
    const ran = await cli(['show', key, '--schema', db.schema], { SIDEEFFECT_SCHEMA: 'elsewhere' });
    expect(ran.code, ran.stderr).toBe(0);
    const wrong = await cli(['show', key, '-o', 'json'], { SIDEEFFECT_SCHEMA: 'elsewhere' });
    // A schema nobody migrated is refused with the fix, not reported as an outage.
    expect(wrong.code).toBe(1);
    expect(JSON.parse(wrong.stdout).error).toMatchObject({
      code: 'STORE_MISCONFIGURED',
      message: expect.stringContaining('sideeffect migrate --schema elsewhere'),
    });
  });

  it('-o text|json|jsonl: ISO-8601 times in JSON, one object a line in jsonl', async () => {
    const { key } = await uncertainKey();
    const lines = (await cli(['list', '-o', 'jsonl'])).stdout.trim().split('\n');
    expect(lines.length).toBeGreaterThan(1);
    const records = lines.map((line) => JSON.parse(line));
    const mine = records.find((r: { key: string }) => r.key === key);
    expect(mine.updatedAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const shown = JSON.parse((await cli(['show', key, '--output', 'json'])).stdout);
    expect(shown.updatedAt).toBe(mine.updatedAt);
    expect(shown.events[0].at).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect((await cli(['show', key, '-o', 'text'])).stdout).toMatch(/^key:\s+/);
  });

  it('every JSON error carries a code and a message, with the documented exit code', async () => {
    const cases: Array<[string[], Record<string, string>, number, string]> = [
      [['show', 'never-seen', '-o', 'json'], {}, 1, 'NOT_FOUND'],
      [
        ['resolve', 'never-seen', '--not-applied', '--reason', 'x', '--json'],
        {},
        1,
        'NOT_UNCERTAIN',
      ],
      [['list', '--state', 'bogus', '-o', 'json'], {}, 2, 'USAGE'],
      [['list', '-o', 'json'], { DATABASE_URL: unreachable }, 3, 'STORE_UNAVAILABLE'],
    ];
    for (const [args, env, exit, code] of cases) {
      const ran = await cli(args, env);
      expect(ran.code, args.join(' ')).toBe(exit);
      const { error } = JSON.parse(ran.stdout.trim().split('\n').at(-1)!);
      expect(error.code, args.join(' ')).toBe(code);
      expect(error.message, args.join(' ')).toEqual(expect.any(String));
      expect(error.message.length).toBeGreaterThan(5);
    }
  });

  it('migrate --status and --dry-run list applied and pending, and change nothing', async () => {
    const empty = await freshSchema('cli_status');
    try {
      const env = { ...asOwner, SIDEEFFECT_SCHEMA: empty.schema };
      const before = JSON.parse((await cli(['migrate', '--status', '-o', 'json'], env)).stdout);
      expect(before.applied).toEqual([]);
      expect(before.pending[0]).toBe('0001_init.sql');
      const dry = await cli(['migrate', '--dry-run'], env);
      expect(dry.code).toBe(0);
      expect(dry.stdout).toMatch(/would apply 0001_init.sql, .* \(dry run: nothing changed\)/);
      const still = JSON.parse((await cli(['migrate', '--status', '--json'], env)).stdout);
      expect(still.pending).toEqual(before.pending);
      expect((await cli(['migrate'], env)).code).toBe(0);
      const after = JSON.parse((await cli(['migrate', '--status', '-o', 'json'], env)).stdout);
      expect(after.pending).toEqual([]);
      expect(after.applied.map((m: { name: string }) => m.name)).toEqual(before.pending);
      expect(after.applied[0].appliedAt).toMatch(/^\d{4}-\d\d-\d\dT/);
      const text = await cli(['migrate', '--status'], env);
      expect(text.stdout).toMatch(/0 pending/);
      const sql = JSON.parse((await cli(['migrate', '--print-sql', '-o', 'json'], env)).stdout);
      expect(sql).toMatchObject({
        schema: empty.schema,
        sql: expect.stringContaining('create schema'),
      });
    } finally {
      await empty.drop();
    }
  });

  it('resolve --dry-run says what the real run says: already decided is not "refused"', async () => {
    const notApplied = await uncertainKey();
    const applied = await uncertainKey();
    await cli(['resolve', notApplied.key, '--not-applied', '--reason', 'absent', '--by', 'ann']);
    expect(
      (
        await cli([
          'resolve',
          applied.key,
          '--applied',
          '--result',
          '{"id":"ch_1"}',
          '--reason',
          'present',
          '--by',
          'ann',
        ])
      ).code,
    ).toBe(0);
    const file = path.join(tmpdir(), `verdicts-${process.pid}-${n}.jsonl`);
    await writeFile(
      file,
      [notApplied.key, applied.key, 'never-seen/charge']
        .map((key) => JSON.stringify({ key, applied: false, reason: 'batch' }))
        .join('\n'),
    );
    const keys = (entries: Array<{ key: string }>) => entries.map((entry) => entry.key).sort();
    const reports = [];
    for (const dry of [['--dry-run'], []]) {
      const ran = await cli(['resolve', '--from-file', file, '-o', 'json', ...dry]);
      expect(ran.code, ran.stderr).toBe(1);
      reports.push(JSON.parse(ran.stdout));
    }
    const [dry, real] = reports;
    expect(keys(dry.alreadyDecided)).toEqual([notApplied.key, applied.key].sort());
    expect(keys(dry.alreadyDecided)).toEqual(keys(real.alreadyDecided));
    expect(keys(dry.refused)).toEqual(['never-seen/charge']);
    expect(keys(real.refused)).toEqual(['never-seen/charge']);
    expect(
      dry.alreadyDecided.find((e: { key: string }) => e.key === notApplied.key).message,
    ).toMatch(/already decided by ann: not applied/);
  });

  it('resolve when Temporal does not answer: recorded in the store, exit 3, and says so', async () => {
    const { key } = await uncertainKey();
    const ran = await cli([
      'resolve',
      key,
      '--not-applied',
      '--reason',
      'not in the ledger',
      '--address',
      '127.0.0.1:1',
    ]);
    expect(ran.code).toBe(3);
    expect(ran.stderr).toMatch(
      /Temporal at 127.0.0.1:1 \(namespace default\) does not answer; recording in the store only/,
    );
    expect((await store.inspect(key))?.state).toBe('free');

    // --profile reads the temporal CLI's profile file, as `temporal --profile` does.
    const again = await uncertainKey();
    const config = path.join(tmpdir(), `temporal-${process.pid}.toml`);
    await writeFile(
      config,
      '[profile.unreachable]\naddress = "127.0.0.1:2"\nnamespace = "elsewhere"\n',
    );
    const profiled = await cli(
      ['resolve', again.key, '--not-applied', '--reason', 'absent', '--profile', 'unreachable'],
      { TEMPORAL_CONFIG_FILE: config, TEMPORAL_ADDRESS: '', TEMPORAL_NAMESPACE: '' },
    );
    expect(profiled.code).toBe(3);
    expect(profiled.stderr).toMatch(
      /Temporal at 127.0.0.1:2 \(namespace elsewhere\) does not answer/,
    );
  });
});

describe('sideeffect resolve racing the UI signal', () => {
  beforeAll(async () => {
    harness = await startHarness('cli', { store, effects, ttlMs: 30_000 });
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
    await handle.signal(resolveSignal, { applied: false, reason: 'not in the bank', by: 'ui:bob' });
    const resolution = await handle.result();
    expect(resolution).toMatchObject({ applied: false, by: 'ui:bob', decidedBy: 'signal' });
    const ran = await cli([
      'resolve',
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
    expect((await store.inspect(key))?.state).toBe('free');
  });

  it('the CLI first: it wins through the ReconcileWorkflow, the later signal changes nothing', async () => {
    const { key, handle } = await waitingReconcile();
    const ran = await cli([
      'resolve',
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
    expect((await store.inspect(key))?.state).toBe('done');
  });

  it('both at once: exactly one wins and the store agrees with the workflow', async () => {
    const { key, handle } = await waitingReconcile();
    const [ran, signalled] = await Promise.all([
      cli([
        'resolve',
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
      handle.signal(resolveSignal, { applied: false, reason: 'ui verdict', by: 'ui:bob' }).then(
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
    expect((await store.inspect(key))?.state).toBe(resolution.applied ? 'done' : 'free');
  });

  it("a verdict whose result fails the effect's result check is refused by the CLI, --from-file, the signal and the Update, before anything is recorded", async () => {
    const { key, handle } = await waitingReconcile('charge');
    const cliRun = await cli([
      'resolve',
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
    const batch = await cli(['resolve', '--from-file', file, '--json']);
    expect(batch.code).toBe(1);
    expect(JSON.parse(batch.stdout).refused).toMatchObject([
      {
        key,
        code: 'INVALID_ACTION',
        message: expect.stringContaining('result refused by effect "charge"'),
      },
    ]);

    await handle.signal(resolveSignal, { applied: true, result: null, reason: 'seen', by: 'ui' });
    await expect(
      handle.executeUpdate(resolveUpdate, {
        args: [{ applied: true, result: { id: ['x'] }, reason: 'seen', by: 'api' }],
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
    expect((await store.inspect(key))?.state).toBe('uncertain');

    const good = await cli([
      'resolve',
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
      key,
      '--applied',
      '--result',
      '{"sent": true}',
      '--reason',
      'seen',
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/returns nothing/);
    const ran = await cli(['resolve', key, '--applied', '--result', 'null', '--reason', 'seen']);
    expect(ran.code, ran.stderr).toBe(0);
    expect(await handle.result()).toMatchObject({ applied: true, result: null });
  });

  it('with no worker polling, resolve gives up after --wait, records the verdict in the store and says so; the late Update changes nothing', async () => {
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
      expect(ran.code, ran.stderr).toBe(0);
      const report = JSON.parse(ran.stdout);
      expect(report).toMatchObject({ won: true, via: 'store', timedOut: true, applied: false });
      expect(report.message).toMatch(/did not answer within 2s/);
      expect(report.message).toMatch(/the unanswered Update can no longer change it/);
      expect(ran.stderr).toMatch(/did not answer within 2s/);
      expect((await store.inspect(key))?.state).toBe('free');

      // A worker comes back: the ReconcileWorkflow ends on the store's verdict.
      const worker = await createWorker({
        store,
        effects: {},
        ttlMs: 30_000,
        sweepEveryMs: 0,
        client: harness.client,
        taskQueue: idle,
        workflowBundle: await testBundle(),
      });
      const running = worker.run();
      try {
        expect(await handle.result()).toMatchObject({ applied: false, decidedBy: 'store' });
      } finally {
        worker.shutdown();
        await running;
      }
      expect((await store.inspect(key))?.state).toBe('free');
      expect((await store.events(key)).filter((e) => e.from === 'uncertain')).toHaveLength(1);
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
      .signal(resolveSignal, { applied: false, reason: 'not in the bank', by: 'you' });
    await signalled.handle.result();
    expect((await store.events(signalled.key)).at(-1)).toMatchObject({
      from: 'uncertain',
      actor: 'you',
      identity: 'ops-console@example.com',
    });
    const shown = await cli(['show', signalled.key]);
    expect(shown.stdout).toMatch(/SENT BY/);
    expect(shown.stdout).toMatch(/you\s+ops-console@example\.com\s+not in the bank/);

    // The CLI's Update: the CLI process's client identity.
    const updated = await waitingReconcile();
    const ran = await cli([
      'resolve',
      updated.key,
      '--not-applied',
      '--reason',
      'checked',
      '--by',
      'ann',
    ]);
    expect(ran.code, ran.stderr).toBe(0);
    const viaUpdate = (await store.events(updated.key)).at(-1);
    expect(viaUpdate).toMatchObject({ actor: 'ann', identity: expect.stringMatching(/^\d+@/) });

    // The store-only path names itself.
    const direct = await uncertainKey();
    expect((await cli(['resolve', direct.key, '--not-applied', '--reason', 'checked'])).code).toBe(
      0,
    );
    expect((await store.events(direct.key)).at(-1)?.identity).toMatch(
      /^\d+@.+ \(sideeffect CLI, store only\)$/,
    );
    const json = JSON.parse((await cli(['show', direct.key, '--json'])).stdout);
    expect(json.events.at(-1).identity).toMatch(/sideeffect CLI, store only/);
  });
});
