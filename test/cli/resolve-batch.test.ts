/**
 * `sideeffect resolve --from-file` and `--resource` after an outage: hundreds of verdicts, each
 * through the key's ReconcileWorkflow when one runs (else the store), first resolution wins per
 * key, and a summary of decided / already decided / refused with the usual exit codes. Real
 * Postgres, the real dev server, the CLI's main in-process (test/support/cli.ts).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeJson, encodeJson, Runner } from '../../src/core/index.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { type ReconcileStatus, resolveSignal, statusQuery } from '../../src/workflows/index.js';
import { type CliRun, runCli } from '../support/cli.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { type GrantedRole, grantedRole } from '../support/roles.js';
import { type Harness, startHarness } from '../temporal/harness.js';

let db: FreshSchema;
let store: PgStore;
let runner: Runner;
let harness: Harness;
let scratch: string;
/** Keys with a ReconcileWorkflow are this run's own: the dev server keeps workflow ids across runs. */
const RUN = Date.now().toString(36);

/** The CLI as an operator role with exactly its grants (docs/database-roles.md). */
let operator: GrantedRole;

function cli(args: string[]): Promise<CliRun> {
  return runCli(args, { DATABASE_URL: operator.url, SIDEEFFECT_SCHEMA: db.schema });
}

async function uncertain(key: string, resource: string): Promise<void> {
  const execution = await runner.execute({ key, resource }, async () => {
    throw new Error('gateway timeout');
  });
  expect(execution.outcome).toBe('uncertain');
}

async function waitingWorkflow(key: string, resource: string): Promise<void> {
  await harness.start(
    'ReconcileWorkflow',
    [{ key, resource, reason: 'gateway timeout' }],
    `reconcile/${key}`,
  );
}

beforeAll(async () => {
  db = await freshSchema('resolve_batch');
  await migrate(db.pool, { schema: db.schema });
  operator = await grantedRole(db, 'operator');
  store = new PgStore({ pool: db.pool, schema: db.schema });
  runner = new Runner(store, { ttlMs: 30_000 });
  harness = await startHarness('resolve-batch', { store, effects: {}, ttlMs: 30_000 });
  scratch = await mkdtemp(path.join(tmpdir(), 'sideeffect-batch-'));
});

afterAll(async () => {
  await harness?.close();
  await db?.drop();
  await operator?.drop();
  await rm(scratch, { recursive: true, force: true });
});

describe('sideeffect resolve --from-file', () => {
  it('500 verdicts: decided through workflows, pending for a worker, already decided, refused, one raced by a UI signal', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const viaWorkflow: string[] = [];
    // 440 uncertain keys with nobody reconciling them: pending in the store for a worker's check.
    for (let i = 0; i < 440; i++) {
      const key = `file-store-${i}/charge`;
      await uncertain(key, `card:${i % 20}`);
      lines.push(
        i % 2 === 0
          ? { key, applied: true, result: { chargeId: `ch_${i}` }, reason: 'in the bank export' }
          : { key, applied: false, reason: 'not in the bank export', by: 'alice' },
      );
    }
    // 40 with a ReconcileWorkflow waiting: the verdict goes through it (its Update).
    for (let i = 0; i < 40; i++) {
      const key = `file-workflow-${RUN}-${i}/charge`;
      await uncertain(key, `card:w${i}`);
      await waitingWorkflow(key, `card:w${i}`);
      viaWorkflow.push(key);
      lines.push({
        key,
        applied: true,
        result: { chargeId: `ch_w${i}` },
        reason: 'in the bank export',
      });
    }
    // 8 someone already decided: their verdict stands.
    const decidedEarlier: string[] = [];
    for (let i = 0; i < 8; i++) {
      const key = `file-earlier-${i}/charge`;
      await uncertain(key, 'card:earlier');
      await store.resolveUncertain(key, {
        applied: true,
        result: encodeJson({ chargeId: 'ch_earlier' }),
        reason: 'probe found it',
        by: 'probe:charge',
      });
      decidedEarlier.push(key);
      lines.push({ key, applied: false, reason: 'not in the bank export' });
    }
    // 6 applied normally: done is done, the store answers with what stands (already decided).
    for (let i = 0; i < 6; i++) {
      const key = `file-done-${i}/charge`;
      await runner.execute({ key, resource: 'card:done' }, async () =>
        encodeJson({ chargeId: 'ch_ok' }),
      );
      decidedEarlier.push(key);
      lines.push({ key, applied: false, reason: 'not in the bank export' });
    }
    // 3 that failed safely (free, never uncertain) and 3 the store never saw: refused.
    const refusedKeys: string[] = [];
    for (let i = 0; i < 3; i++) {
      const key = `file-free-${i}/charge`;
      const failed = await runner.execute(
        { key, resource: 'card:free', retrySafety: 'safe' },
        async () => {
          throw new Error('declined before sending');
        },
      );
      expect(failed.outcome).toBe('failed');
      refusedKeys.push(key, `file-unknown-${i}/charge`);
      lines.push({ key, applied: false, reason: 'not in the bank export' });
      lines.push({
        key: `file-unknown-${i}/charge`,
        applied: false,
        reason: 'not in the bank export',
      });
    }
    expect(lines).toHaveLength(500);
    await Promise.all(viaWorkflow.map((key) => harness.waitForReconcile(key, 'waiting')));

    const file = path.join(scratch, 'verdicts.jsonl');
    await writeFile(file, `${lines.map((line) => JSON.stringify(line)).join('\n')}\n`);

    // A person in the UI signals one of the waiting keys while the batch runs.
    const raced = viaWorkflow[20]!;
    const uiVerdict = { applied: false, reason: 'checked by hand in the UI', by: 'bob' };
    const [run] = await Promise.all([
      cli(['resolve', '--any-attempt', '--from-file', file, '--by', 'ops-batch', '--json']),
      harness.reconcile(raced).signal(resolveSignal, uiVerdict),
    ]);
    // Pending verdicts decide nothing yet: exit 3, as when Temporal does not answer.
    expect(run.code, run.stderr).toBe(3);
    const report = JSON.parse(run.stdout);
    expect(report.pending.map((entry: { key: string }) => entry.key).sort()).toEqual(
      lines
        .slice(0, 440)
        .map((line) => line.key as string)
        .sort(),
    );

    const raceWonBySignal = report.alreadyDecided.some(
      (entry: { key: string }) => entry.key === raced,
    );
    expect(report.alreadyDecided.map((entry: { key: string }) => entry.key).sort()).toEqual(
      [...decidedEarlier, ...(raceWonBySignal ? [raced] : [])].sort(),
    );
    expect(report.refused.map((entry: { key: string }) => entry.key).sort()).toEqual(
      refusedKeys.sort(),
    );
    expect(report.refused.every((entry: { code: string }) => entry.code === 'NOT_UNCERTAIN')).toBe(
      true,
    );
    expect(report.failed).toEqual([]);
    expect(report.decided).toHaveLength(
      500 - 440 - decidedEarlier.length - refusedKeys.length - (raceWonBySignal ? 1 : 0),
    );

    // The store holds each of those lines' verdict, by its author, pending a worker's check.
    for (const line of lines.slice(0, 440)) {
      const record = await store.inspect(line.key as string);
      const [held] = await store.pendingVerdicts(line.key as string);
      expect(record?.state).toBe('uncertain');
      expect(held).toMatchObject({
        state: 'pending',
        applied: line.applied,
        by: line.applied ? 'ops-batch' : 'alice',
      });
      if (line.applied) expect(decodeJson(held!.result!)).toEqual(line.result);
    }
    // Workflow keys were decided by their ReconcileWorkflow (Update), except the raced one if the UI won.
    for (const key of viaWorkflow) {
      const resolution = (await harness.reconcile(key).result()) as ReconcileResolution;
      const record = await store.inspect(key);
      if (key === raced && raceWonBySignal) {
        expect(resolution).toMatchObject({ applied: false, decidedBy: 'signal', by: 'bob' });
        expect(record?.state).toBe('free');
        continue;
      }
      expect(resolution).toMatchObject({ applied: true, decidedBy: 'update', by: 'ops-batch' });
      expect(record?.state).toBe('done');
      if (key === raced) {
        // The CLI won: the UI's signal is refused in the open, not silently dropped.
        const status = (await harness.reconcile(key).query(statusQuery)) as ReconcileStatus;
        expect(status.rejected.map((entry) => entry.input)).toEqual([uiVerdict]);
      }
    }
    // The earlier verdicts were not overwritten.
    for (const key of decidedEarlier) {
      expect(decodeJson((await store.inspect(key))!.result!)).toEqual({
        chargeId: key.startsWith('file-done') ? 'ch_ok' : 'ch_earlier',
      });
    }
    for (const key of refusedKeys)
      expect((await store.inspect(key))?.state ?? 'absent').not.toBe('done');

    // Run again: every verdict is already decided, refused or (still no worker) pending again.
    const again = JSON.parse(
      (await cli(['resolve', '--any-attempt', '--from-file', file, '--json'])).stdout,
    );
    expect(again.decided).toEqual([]);
    expect(again.pending).toHaveLength(440);
    expect(again.alreadyDecided.length + again.refused.length).toBe(60);
    for (const line of lines.slice(0, 440))
      expect((await store.pendingVerdicts(line.key as string)).map((v) => v.state)).toEqual([
        'pending',
        'pending',
      ]);
  }, 300_000);

  it('checks every line before sending anything: one bad line is exit 2 and nothing is decided', async () => {
    await uncertain('file-bad-1/charge', 'card:bad');
    const file = path.join(scratch, 'bad.jsonl');
    await writeFile(
      file,
      [
        JSON.stringify({ key: 'file-bad-1/charge', applied: false, reason: 'not in the export' }),
        JSON.stringify({ key: 'file-bad-2/charge', applied: false, result: 1, reason: 'x' }),
      ].join('\n'),
    );
    const run = await cli(['resolve', '--any-attempt', '--from-file', file]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain(`${file}:2: "result" only goes with "applied": true`);
    expect((await store.inspect('file-bad-1/charge'))?.state).toBe('uncertain');

    await writeFile(file, '{"key": "file-bad-1/charge", "applied": "no", "reason": "x"}\n');
    expect((await cli(['resolve', '--any-attempt', '--from-file', file])).stderr).toContain(
      ':1: invalid applied: must be a boolean',
    );
    const mixed = await cli(['resolve', '--any-attempt', '--from-file', file, '--not-applied']);
    expect(mixed.code).toBe(2);
    expect(mixed.stderr).toContain('--not-applied does not go with --from-file');
  });
});

describe('sideeffect resolve --resource', () => {
  it('decides the uncertain keys of one resource by age; --dry-run sends nothing; stats sees it', async () => {
    const old = ['res-old-1/charge', 'res-old-2/charge', 'res-old-3/charge'];
    const fresh = ['res-new-1/charge', 'res-new-2/charge'];
    for (const key of old) await uncertain(key, 'card:outage');
    await uncertain('res-elsewhere/charge', 'card:fine');
    // Two hours pass for the old keys (the store judges age by its own clock, so move their times).
    await db.pool.query(
      `update ${db.schema}.keys set updated_at = updated_at - interval '2 hours' where key = any($1)`,
      [old],
    );
    await db.pool.query(
      `update ${db.schema}.events set at = at - interval '2 hours' where key = any($1)`,
      [old],
    );
    for (const key of fresh) await uncertain(key, 'card:outage');

    const dry = await cli([
      'resolve',
      '--any-attempt',
      '--resource',
      'card:outage',
      '--older-than',
      '1h',
      '--not-applied',
      '--reason',
      'outage',
      '--dry-run',
      '--json',
    ]);
    expect(dry.code, dry.stderr).toBe(0);
    expect(JSON.parse(dry.stdout)).toMatchObject({ dryRun: true, decided: old, refused: [] });
    for (const key of old) expect((await store.inspect(key))?.state).toBe('uncertain');

    const human = await cli([
      'resolve',
      '--any-attempt',
      '--resource',
      'card:outage',
      '--older-than',
      '1h',
      '--not-applied',
      '--reason',
      'outage',
      '--by',
      'carol',
      // No Temporal worker serves these keys (a plain Runner): no worker would ever check them.
      '--store-only',
    ]);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain(
      '3 uncertain key(s) on card:outage: decided 3, already decided 0, refused 0, failed 0',
    );
    for (const key of old) expect((await store.inspect(key))?.state).toBe('free');
    for (const key of [...fresh, 'res-elsewhere/charge'])
      expect((await store.inspect(key))?.state).toBe('uncertain');

    const rest = await cli([
      'resolve',
      '--any-attempt',
      '--resource',
      'card:outage',
      '--newer-than',
      '1h',
      '--applied',
      '--reason',
      'in the export',
      '--store-only',
      '--json',
    ]);
    expect(rest.code, rest.stderr).toBe(0);
    expect(JSON.parse(rest.stdout).decided).toEqual(fresh);
    for (const key of fresh) expect(decodeJson((await store.inspect(key))!.result!)).toBeNull();
    expect((await store.inspect('res-elsewhere/charge'))?.state).toBe('uncertain');

    const usage = await cli([
      'resolve',
      '--any-attempt',
      '--resource',
      'card:outage',
      '--applied',
      '--result',
      '{}',
      '--reason',
      'x',
    ]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('put per-key results in --from-file');

    const stats = JSON.parse((await cli(['stats', '--json'])).stdout);
    expect(stats.backlog.count).toBe((await store.list({ state: 'uncertain' })).length);
    expect(stats.backlog.oldestAgeMs).toBeGreaterThan(0);
    expect(stats.resolutions).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          by: 'carol',
          kind: 'person',
          verdict: 'not_applied',
          count: 3,
        }),
      ]),
    );
    expect(
      stats.resolutions.find((r: { by: string }) => r.by === 'carol').medianSeconds,
    ).toBeGreaterThanOrEqual(4);
    expect(stats.timeToResolution.count).toBe(
      stats.resolutions.reduce((sum: number, r: { count: number }) => sum + r.count, 0),
    );
    const printed = await cli(['stats']);
    expect(printed.stdout).toMatch(/^uncertain now:\s+\d+, oldest waiting/m);
    expect(printed.stdout).toMatch(/^carol\s+person\s+not_applied\s+3/m);
  }, 120_000);
});
