// A user's worker process on its own SDK install: its own connections, Client and Worker, with the
// library added as a plugin. Drives one charge through the uncertain path and resolves it with the
// package's own CLI, then prints one JSON line for the test.
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import {
  bundleWorkflowCode,
  DefaultLogger,
  NativeConnection,
  Runtime,
  Worker,
} from '@temporalio/worker';
import pg from 'pg';
import { defineEffect } from 'sideeffect/activities';
import { migrate, PgStore } from 'sideeffect/postgres';
import { clusterSettings, SideEffectPlugin } from 'sideeffect/worker';
import { reconcileWorkflowId, statusQuery } from 'sideeffect/workflows';

const { DATABASE_URL, SIDEEFFECT_SCHEMA: schema, TASK_QUEUE: taskQueue, BUNDLE_OUT } = process.env;
Runtime.install({ logger: new DefaultLogger('WARN') });

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
await migrate(pool, { schema });
const store = new PgStore({ pool, schema });
const { connectionOptions, namespace } = clusterSettings();
const connection = await Connection.connect(connectionOptions);
const client = new Client({ connection, namespace });
const nativeConnection = await NativeConnection.connect(connectionOptions);

const bundle = await bundleWorkflowCode({
  workflowsPath: fileURLToPath(new URL('./workflows.mjs', import.meta.url)),
  logger: new DefaultLogger('WARN'),
});
writeFileSync(BUNDLE_OUT, bundle.code);

const charge = defineEffect({
  resource: (input) => `card:${input.card}`,
  async apply() {
    throw new Error('the bank timed out after the request was sent');
  },
});

const worker = await Worker.create({
  connection: nativeConnection,
  namespace,
  taskQueue,
  workflowBundle: bundle,
  activities: { greet: async () => 'hello' },
  plugins: [
    new SideEffectPlugin({ store, effects: { charge }, ttlMs: 5_000, client, sweepEveryMs: 0 }),
  ],
});

const workflowId = `${taskQueue}-pay`;
const key = `${workflowId}/charge`;
let summary;
await worker.runUntil(async () => {
  const handle = await client.workflow.start('Pay', {
    taskQueue,
    workflowId,
    args: [{ card: '4242' }],
  });
  const reconcile = client.workflow.getHandle(reconcileWorkflowId(key));
  const deadline = Date.now() + 120_000;
  let status;
  while (status?.state !== 'waiting') {
    if (Date.now() > deadline)
      throw new Error(`reconcile/${key} never waited: ${JSON.stringify(status)}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
    status = await reconcile.query(statusQuery).catch(() => undefined);
  }
  const stateBefore = (await store.inspect(key))?.state;
  const cli = fileURLToPath(
    new URL('./node_modules/sideeffect/bin/sideeffect.js', import.meta.url),
  );
  const resolved = await promisify(execFile)(process.execPath, [
    cli,
    'resolve',
    '--any-attempt',
    key,
    '--applied',
    '--result',
    '{"chargeId":"ch_42"}',
    '--reason',
    'the bank statement shows the charge',
    '--json',
  ]);
  const result = await handle.result();
  summary = {
    stateBefore,
    cli: JSON.parse(resolved.stdout),
    result,
    stateAfter: (await store.inspect(key))?.state,
  };
});
await nativeConnection.close();
await connection.close();
await pool.end();
process.stdout.write(`${JSON.stringify(summary)}\n`);
