/**
 * A namespace without the SideEffect* search attributes (a second dev server
 * started without them): the worker warns once with the exact registration
 * command and runs memo-only, so the uncertain path still resolves from the
 * CLI; with `searchAttributes: 'require'` the worker refuses to run instead.
 * The worker reaches that server through a client-config profile file, the
 * CLI through TEMPORAL_ADDRESS.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  bundleWorkflowCode,
  DefaultLogger,
  type LogEntry,
  NativeConnection,
  Runtime,
  Worker,
  type WorkflowBundleWithSourceMap,
} from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { SearchAttributesMissingError } from '../../src/core/errors.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import {
  clusterSettings,
  SideEffectPlugin,
  type SideEffectPluginOptions,
} from '../../src/worker/index.js';
import {
  reconcileWorkflowId,
  type SideEffectOutcome,
  statusQuery,
} from '../../src/workflows/index.js';
import { runCli } from '../support/cli.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { uniqueTaskQueue } from '../support/temporal.js';
import { type BareTemporal, startBareTemporal } from './bare-temporal.js';

const logged: LogEntry[] = [];
Runtime.install({
  logger: new DefaultLogger('WARN', (entry) => {
    logged.push(entry);
  }),
});

const COMMAND =
  'temporal operator search-attribute create --namespace default --name SideEffectKey --type Keyword --name SideEffectResource --type Keyword --name SideEffectState --type Keyword';

let bare: BareTemporal;
let db: FreshSchema;
let dir: string;
let configFile: string;
let bundle: WorkflowBundleWithSourceMap;

beforeAll(async () => {
  [bare, db, bundle] = await Promise.all([
    startBareTemporal(),
    freshSchema('search_attributes'),
    bundleWorkflowCode({
      workflowsPath: fileURLToPath(new URL('../temporal/workflows.ts', import.meta.url)),
      logger: new DefaultLogger('ERROR'),
    }),
  ]);
  await migrate(db.pool, { schema: db.schema });
  dir = mkdtempSync(path.join(tmpdir(), 'sideeffect-envconfig-'));
  configFile = path.join(dir, 'temporal.toml');
  writeFileSync(configFile, `[profile.bare]\naddress = "${bare.address}"\nnamespace = "default"\n`);
}, 240_000);

afterAll(async () => {
  await bare?.stop();
  await db?.drop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A Worker with the plugin on the bare server, connected through the config file's `bare` profile. */
async function bareWorker(taskQueue: string, options: SideEffectPluginOptions) {
  const { connectionOptions, namespace } = clusterSettings({ configFile, profile: 'bare' });
  const connection = await NativeConnection.connect(connectionOptions);
  const plugin = new SideEffectPlugin(options);
  const worker = await Worker.create({
    connection,
    namespace,
    taskQueue,
    workflowBundle: bundle,
    plugins: [plugin],
  });
  return { worker, client: plugin.client, close: () => connection.close() };
}

const lost = defineEffect({
  resource: () => 'bare-account',
  async apply() {
    throw new Error('connection reset after the write');
  },
});

describe('a namespace without the search attributes', () => {
  it('warns once with the exact command, runs memo-only, and the uncertain path resolves from the CLI', async () => {
    const store = new PgStore({ pool: db.pool, schema: db.schema });
    const taskQueue = uniqueTaskQueue('bare');
    const sw = await bareWorker(taskQueue, {
      store,
      effects: { lost },
      ttlMs: 2_000,
      sweepEveryMs: 0,
    });
    const running = sw.worker.run();
    try {
      const workflowId = `${taskQueue}-lost`;
      const key = `${workflowId}/lost`;
      const handle = await sw.client.workflow.start('guarded', {
        taskQueue,
        workflowId,
        args: ['lost', { amount: 1 }],
      });
      const reconcile = sw.client.workflow.getHandle(reconcileWorkflowId(key));
      const deadline = Date.now() + 60_000;
      while ((await reconcile.query(statusQuery).catch(() => undefined))?.state !== 'waiting') {
        if (Date.now() > deadline) throw new Error('the ReconcileWorkflow never waited');
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      const description = await reconcile.describe();
      expect(description.memo).toMatchObject({ key, resource: 'bare-account' });

      const cli = await runCli(
        [
          'resolve',
          key,
          '--any-attempt',
          '--applied',
          '--result',
          '"ok"',
          '--reason',
          'seen at the bank',
          '--json',
        ],
        {
          DATABASE_URL: databaseUrl(),
          SIDEEFFECT_SCHEMA: db.schema,
          TEMPORAL_ADDRESS: bare.address,
        },
      );
      expect(cli.code, cli.stderr).toBe(0);
      expect(JSON.parse(cli.stdout)).toMatchObject({ won: true, via: 'workflow', applied: true });
      const outcome = (await handle.result()) as SideEffectOutcome<unknown>;
      expect(outcome).toEqual({ outcome: 'reconciled', result: 'ok', key });
    } finally {
      sw.worker.shutdown();
      await running;
      await sw.close();
    }
    const warnings = logged.filter((entry) => entry.message.includes('search attribute'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.message).toContain(COMMAND);
  }, 180_000);

  it("with searchAttributes: 'require' the worker's run fails with the command instead", async () => {
    const sw = await bareWorker(uniqueTaskQueue('bare-require'), {
      store: new PgStore({ pool: db.pool, schema: db.schema }),
      effects: { lost },
      ttlMs: 2_000,
      searchAttributes: 'require',
    });
    const refused = await sw.worker
      .run()
      .catch((error: unknown) => error)
      .finally(sw.close);
    expect(refused).toBeInstanceOf(SearchAttributesMissingError);
    expect(refused).toMatchObject({
      code: 'SEARCH_ATTRIBUTES_MISSING',
      missing: ['SideEffectKey', 'SideEffectResource', 'SideEffectState'],
      command: COMMAND,
    });
  });
});
