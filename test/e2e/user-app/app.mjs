// A user's app on its own SDK install, with what production teams turn on: an encryption codec on
// its data converter, the SDK's OpenTelemetryPlugin exporting to memory, and Worker Versioning
// with PINNED as the default.
// The library joins as a plugin on the app's own Worker.create. Two payments end uncertain on
// version v1; v2 is deployed and made current while v1 keeps running for the pinned payments.
// Prints one JSON line when both keys wait for a person (the test resolves one from the CLI and
// one from the UI), then one with the payments' results and the finished spans. Environment:
// DATABASE_URL, SIDEEFFECT_SCHEMA, TASK_QUEUE, DEPLOYMENT and CARDS (a card number per payment).
import { fileURLToPath } from 'node:url';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { Resource } from '@opentelemetry/resources';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { Client, Connection } from '@temporalio/client';
import { OpenTelemetryPlugin } from '@temporalio/interceptors-opentelemetry';
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
import { dataConverter } from './data-converter.mjs';

const { DATABASE_URL, SIDEEFFECT_SCHEMA: schema, TASK_QUEUE: taskQueue, DEPLOYMENT } = process.env;
Runtime.install({ logger: new DefaultLogger('WARN') });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const print = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

const exporter = new InMemorySpanExporter();
const spanProcessor = new SimpleSpanProcessor(exporter);
const provider = new BasicTracerProvider();
provider.addSpanProcessor(spanProcessor);
// As NodeSDK does: without a context manager no span has a parent, and no trace crosses a process.
provider.register({ contextManager: new AsyncLocalStorageContextManager() });
const resource = new Resource({ 'service.name': 'user-app' });
// Traces the app's Client (trace headers on its starts), its Worker's activities and its
// workflows (bundled interceptors; workflow spans leave the sandbox through a sink).
const tracing = new OpenTelemetryPlugin({ resource, spanProcessor });

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
await migrate(pool, { schema });
const store = new PgStore({ pool, schema });
const { connectionOptions, namespace } = clusterSettings();
const connection = await Connection.connect(connectionOptions);
const client = new Client({ connection, namespace, dataConverter, plugins: [tracing] });
const native = await NativeConnection.connect(connectionOptions);

const workflowBundle = await bundleWorkflowCode({
  workflowsPath: fileURLToPath(new URL('./workflows.mjs', import.meta.url)),
  logger: new DefaultLogger('WARN'),
  plugins: [tracing],
});

const charge = defineEffect({
  resource: (input) => `account:${input.account}`,
  async apply() {
    throw new Error('the bank timed out after the request was sent');
  },
});

/** One deployment version's worker, running until shut down. */
async function deploy(buildId) {
  const created = await Worker.create({
    connection: native,
    namespace,
    taskQueue,
    workflowBundle,
    dataConverter,
    workerDeploymentOptions: {
      useWorkerVersioning: true,
      version: { deploymentName: DEPLOYMENT, buildId },
      defaultVersioningBehavior: 'PINNED',
    },
    plugins: [
      tracing,
      new SideEffectPlugin({ store, effects: { charge }, ttlMs: 5_000, client, sweepEveryMs: 0 }),
    ],
  });
  const running = created.run();
  // A version exists once its worker polled; the deploy step then makes it current.
  for (let attempt = 0; ; attempt++) {
    try {
      await client.workflowService.setWorkerDeploymentCurrentVersion({
        namespace,
        deploymentName: DEPLOYMENT,
        buildId,
        identity: 'user-app deploy',
      });
      break;
    } catch (error) {
      if (attempt > 240) throw error;
      await sleep(250);
    }
  }
  return { worker: created, running };
}

const v1 = await deploy('v1');
const cards = JSON.parse(process.env.CARDS);
const payments = Object.fromEntries(
  await Promise.all(
    Object.entries(cards).map(async ([via, card]) => [
      via,
      await client.workflow.start('Pay', {
        taskQueue,
        workflowId: `${taskQueue}-pay-${via}`,
        args: [{ account: `acct-${via}`, card, cents: 1250 }],
      }),
    ]),
  ),
);
const keys = Object.fromEntries(
  Object.entries(payments).map(([via, handle]) => [via, `${handle.workflowId}/charge`]),
);
for (const key of Object.values(keys)) {
  const reconcile = client.workflow.getHandle(reconcileWorkflowId(key));
  for (
    let attempt = 0;
    (await reconcile.query(statusQuery).catch(() => undefined))?.state !== 'waiting';
    attempt++
  ) {
    if (attempt > 480) throw new Error(`reconcile/${key} never waited`);
    await sleep(250);
  }
}
const v2 = await deploy('v2');
print({ waiting: keys });

const results = Object.fromEntries(
  await Promise.all(
    Object.entries(payments).map(async ([via, handle]) => [via, await handle.result()]),
  ),
);
for (const { worker } of [v2, v1]) worker.shutdown();
await Promise.all([v1.running, v2.running]);
const spans = exporter.getFinishedSpans().map((span) => ({
  name: span.name,
  traceId: span.spanContext().traceId,
  attributes: span.attributes,
}));
await native.close();
await connection.close();
await pool.end();
print({ results, spans });
