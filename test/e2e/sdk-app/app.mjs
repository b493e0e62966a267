// A user's app on its own SDK install: the library's plugin on the app's Worker.create, which
// bundles workflowsPath with the SDK's bundler, reuseV8Context left at the SDK's default. Two
// payments, one after the other on the same worker, each end uncertain and are resolved; each
// caller must wake with its verdict. Prints one JSON line: `{ refused }` when Worker.create fails,
// else `{ results, ms }`, or `{ stuck }` naming the caller that did not wake. Environment:
// DATABASE_URL, SIDEEFFECT_SCHEMA, TASK_QUEUE, TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE.
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import pg from 'pg';
import { defineEffect } from 'sideeffect/activities';
import { connectionConfig, migrate, PgStore } from 'sideeffect/postgres';
import { clusterSettings, SideEffectPlugin } from 'sideeffect/worker';
import { reconcileWorkflowId, resolveUpdate, statusQuery } from 'sideeffect/workflows';

const { SIDEEFFECT_SCHEMA: schema, TASK_QUEUE: taskQueue } = process.env;
Runtime.install({ logger: new DefaultLogger('WARN') });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const print = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

const pool = new pg.Pool({ ...connectionConfig(), max: 4 });
await migrate(pool, { schema });
const store = new PgStore({ pool, schema });
const { connectionOptions, namespace } = clusterSettings();
const connection = await Connection.connect(connectionOptions);
const client = new Client({ connection, namespace });
const native = await NativeConnection.connect(connectionOptions);

const charge = defineEffect({
  resource: (input) => `account:${input.account}`,
  async apply() {
    throw new Error('the bank timed out after the request was sent');
  },
});

async function close() {
  await native.close();
  await connection.close();
  await pool.end();
}

const started = Date.now();
let worker;
try {
  worker = await Worker.create({
    connection: native,
    namespace,
    taskQueue,
    workflowsPath: fileURLToPath(new URL('./workflows.mjs', import.meta.url)),
    bundlerOptions: { logger: new DefaultLogger('WARN') },
    plugins: [
      new SideEffectPlugin({
        store,
        effects: { charge },
        ttlMs: 5_000,
        sweepEveryMs: 0,
        searchAttributes: false,
      }),
    ],
  });
} catch (error) {
  print({ refused: { name: error.name, code: error.code, message: error.message } });
  await close();
  process.exit(1);
}

/** One payment: uncertain, resolved as applied, and its caller woken with the result. */
async function pay(n) {
  const handle = await client.workflow.start('Pay', {
    taskQueue,
    workflowId: `${taskQueue}-pay-${n}`,
    args: [{ account: 'acct', cents: n }],
  });
  const reconcile = client.workflow.getHandle(reconcileWorkflowId(`${handle.workflowId}/charge`));
  let status;
  for (let attempt = 0; status?.state !== 'waiting'; attempt++) {
    if (attempt > 240) throw new Error(`caller ${n}: its key never became uncertain`);
    if (attempt > 0) await sleep(250);
    status = await reconcile.query(statusQuery).catch(() => undefined);
  }
  // The verdict names the attempt checked: the one the waiting run judges.
  await reconcile.executeUpdate(resolveUpdate, {
    args: [
      {
        applied: true,
        result: { chargeId: `ch_${n}` },
        reason: 'seen at the bank',
        by: 'matrix',
        fence: status.fence,
      },
    ],
  });
  let timer;
  const woke = await Promise.race([
    handle.result(),
    new Promise((resolve) => {
      timer = setTimeout(resolve, 30_000);
    }),
  ]);
  clearTimeout(timer);
  if (woke === undefined) {
    print({ stuck: { caller: n, workflowId: handle.workflowId } });
    await handle.terminate('the sdk matrix gave up on it');
  }
  return woke;
}

const results = await worker.runUntil(async () => {
  const first = await pay(1);
  const second = first === undefined ? undefined : await pay(2);
  return [first, second];
});
print({ results, ms: Date.now() - started });
await close();
