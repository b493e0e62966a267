/**
 * The durability check against a real primary and streaming standby (test/support/replication.ts):
 * with the standby asynchronous, the worker's start, `checkDurability` and `sideeffect doctor` say
 * a failover can apply an effect twice, and `durability: 'accept-loss'` starts anyway; made
 * synchronous, the same checks pass; pointed at the standby, the worker, `migrate()` and the
 * CLI refuse with STORE_IS_STANDBY naming it, never a quiet "no keys" or "up to date".
 */
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Runtime, Worker } from '@temporalio/worker';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { DurabilityAtRiskError, StoreIsStandbyError } from '../../src/core/errors.js';
import type { Durability } from '../../src/store/postgres/durability.js';
import { checkDurability, migrate, PgStore } from '../../src/store/postgres/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { runCli } from '../support/cli.js';
import { type ReplicatedPostgres, startReplicated } from '../support/replication.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { testBundle } from '../temporal/harness.js';

const SCHEMA = 'durability';
let pair: ReplicatedPostgres;
let primary: pg.Pool;
let standby: pg.Pool;
let native: NativeConnection;
let connection: Connection;
let client: Client;

const charge = defineEffect({ resource: () => 'card:1', apply: async () => ({ id: 'ch_1' }) });

beforeAll(async () => {
  pair = await startReplicated({ synchronous: false });
  primary = new pg.Pool({ connectionString: pair.primary.url, max: 2 });
  standby = new pg.Pool({ connectionString: pair.standby.url, max: 2 });
  primary.on('error', () => {});
  standby.on('error', () => {});
  await migrate(primary, { schema: SCHEMA, log: () => {} });
  await pair.caughtUp();
  native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
  connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
}, 120_000);

afterAll(async () => {
  await primary?.end();
  await standby?.end();
  await connection?.close();
  await native?.close();
  await pair?.stop();
});

async function workerOn(pool: pg.Pool, durability?: Durability, sweepEveryMs = 0) {
  return Worker.create({
    connection: native,
    namespace: TEMPORAL_NAMESPACE,
    taskQueue: uniqueTaskQueue('durability'),
    workflowBundle: await testBundle(),
    plugins: [
      new SideEffectPlugin({
        store: new PgStore({ pool, schema: SCHEMA }),
        effects: { charge },
        ttlMs: 5_000,
        client,
        sweepEveryMs,
        searchAttributes: false,
        ...(durability ? { durability } : {}),
      }),
    ],
  });
}

const cli = (args: string[], url: string) =>
  runCli([...args, '--connection', url, '--schema', SCHEMA], {});

describe('a primary with an asynchronous standby', () => {
  it('checkDurability and the worker refuse with DURABILITY_AT_RISK, naming the standby and the fix', async () => {
    const refused = await checkDurability(primary).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(DurabilityAtRiskError);
    expect(refused).toMatchObject({
      code: 'DURABILITY_AT_RISK',
      risks: [{ kind: 'asynchronous' }],
    });
    const { message } = refused as Error;
    expect(message).toMatch(/standby "standby"/);
    expect(message).toMatch(/applies an effect twice/);
    expect(message).toMatch(/synchronous_standby_names/);
    expect(message).toContain(`127.0.0.1:${pair.primary.port}`);
    const worker = await workerOn(primary);
    const failed = await worker.run().catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(DurabilityAtRiskError);
  });

  it("durability 'accept-loss' starts the worker (the risk logged); 'managed' too", async () => {
    expect(await (await workerOn(primary, 'accept-loss')).runUntil(async () => 'ran')).toBe('ran');
    expect(await (await workerOn(primary, 'managed')).runUntil(async () => 'ran')).toBe('ran');
  });

  it('sideeffect doctor: RISK asynchronous, exit 1', async () => {
    const run = await cli(['doctor', '-o', 'json'], pair.primary.url);
    expect(run.code).toBe(1);
    const report = JSON.parse(run.stdout);
    expect(report.replication).toMatchObject({
      mode: 'asynchronous',
      standbys: [{ name: 'standby', syncState: 'async' }],
    });
    expect(report.findings).toContainEqual(
      expect.objectContaining({
        area: 'replication',
        status: 'risk',
        next: expect.stringMatching(/synchronous_standby_names/),
      }),
    );
  });
});

it('a durability the plugin does not know is refused when it is made (INVALID_ACTION)', () => {
  expect(
    () =>
      new SideEffectPlugin({
        store: new PgStore({ pool: primary, schema: SCHEMA }),
        effects: { charge },
        ttlMs: 5_000,
        durability: 'relaxed' as Durability,
      }),
  ).toThrow(expect.objectContaining({ code: 'INVALID_ACTION', field: 'durability' }));
});

describe('connected to the standby', () => {
  it('migrate() refuses with STORE_IS_STANDBY naming the server', async () => {
    const refused = await migrate(standby, { schema: SCHEMA, log: () => {} }).catch(
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(StoreIsStandbyError);
    expect((refused as StoreIsStandbyError).host).toContain(`127.0.0.1:${pair.standby.port}`);
  });

  it('the CLI refuses list, migrate and migrate --status, in text and JSON, never "no keys" or "up to date"', async () => {
    for (const args of [['list'], ['migrate'], ['migrate', '--status'], ['doctor']]) {
      const run = await cli(args, pair.standby.url);
      expect(run.code, args.join(' ')).toBe(1);
      expect(run.stderr).toMatch(/is a standby \(read-only, in recovery\), not the primary/);
      expect(run.stderr).toContain(`127.0.0.1:${pair.standby.port}`);
      expect(run.stdout).not.toMatch(/no keys|up to date/);
    }
    const json = await cli(['list', '-o', 'json'], pair.standby.url);
    expect(JSON.parse(json.stdout).error).toMatchObject({ code: 'STORE_IS_STANDBY' });
  });

  it("the worker refuses with STORE_IS_STANDBY, under 'accept-loss' too", async () => {
    for (const durability of [undefined, 'accept-loss'] as const) {
      const failed = await (await workerOn(standby, durability))
        .run()
        .catch((error: unknown) => error);
      expect(failed).toBeInstanceOf(StoreIsStandbyError);
    }
  });
});

/** Sets synchronous_standby_names on the primary and waits until the standby's state follows. */
async function standbyNames(names: string): Promise<void> {
  await primary.query(`alter system set synchronous_standby_names = '${names}'`);
  await primary.query('select pg_reload_conf()');
  const want = names ? 'sync' : 'async';
  await until(async () => {
    const { rows } = await primary.query(
      `select sync_state from pg_stat_replication where application_name = 'standby'`,
    );
    return rows[0]?.sync_state === want;
  });
}

async function until(met: () => boolean | Promise<boolean>): Promise<void> {
  while (!(await met())) await new Promise((resolve) => setTimeout(resolve, 100));
}

describe('the standby made synchronous', () => {
  beforeAll(() => standbyNames('standby'), 60_000);

  it('a running worker tells at its next sweep when the standby turns asynchronous, once, and when it is synchronous again', async () => {
    const logger = Runtime.instance().logger;
    const error = vi.spyOn(logger, 'error');
    const info = vi.spyOn(logger, 'info');
    const said = (spy: typeof error, pattern: RegExp) =>
      spy.mock.calls.filter(([message]) => pattern.test(String(message)));
    const atRisk =
      /can now lose an acknowledged commit.*asynchronous replication to standby "standby"/;
    try {
      const worker = await workerOn(primary, undefined, 100);
      await worker.runUntil(async () => {
        // Its start check passed once it sweeps (it then leads: the store's advisory lock).
        await until(
          async () =>
            (await primary.query(`select from pg_locks where locktype = 'advisory' and granted`))
              .rowCount !== 0,
        );
        // What Patroni's synchronous_mode does without synchronous_mode_strict once its
        // synchronous standby is gone: the primary goes on, asynchronous.
        await standbyNames('');
        await until(() => said(error, atRisk).length > 0);
        // Several sweeps more while it stays at risk: said once, not at each.
        await new Promise((resolve) => setTimeout(resolve, 600));
        await standbyNames('standby');
        await until(() => said(info, /durability risk gone: asynchronous/).length > 0);
      });
      expect(said(error, atRisk)).toHaveLength(1);

      expect(said(error, atRisk)[0]![0]).toMatch(/fix: make the standbys synchronous/);
    } finally {
      error.mockRestore();
      info.mockRestore();
      await standbyNames('standby');
    }
  }, 60_000);

  it('checkDurability, doctor and the worker pass', async () => {
    const report = await checkDurability(primary);
    expect(report).toMatchObject({ mode: 'synchronous', risks: [] });
    const run = await cli(['doctor'], pair.primary.url);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/ok\s+replication\s+synchronous/);
    expect(await (await workerOn(primary)).runUntil(async () => 'ran')).toBe('ran');
  });

  it('synchronous_commit = local beside it: DURABILITY_AT_RISK', async () => {
    const local = new pg.Pool({
      connectionString: pair.primary.url,
      options: '-c synchronous_commit=local',
      max: 1,
    });
    try {
      await expect(checkDurability(local)).rejects.toMatchObject({
        code: 'DURABILITY_AT_RISK',
        risks: [{ kind: 'commit-local' }],
      });
    } finally {
      await local.end();
    }
  });
});
