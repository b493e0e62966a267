/**
 * A worker process for the metrics test: its own Runtime with a Prometheus endpoint (a Runtime is
 * per process, so the test's in-process workers cannot have one), the test workflows, PgStore on
 * the test's schema, and the sweeper every 300 ms so the backlog gauges follow quickly.
 *
 *   SCHEMA=... TASK_QUEUE=... METRICS_ADDRESS=127.0.0.1:9464 node --import tsx test/temporal/metrics-worker.ts
 *
 * PROMETHEUS_SUFFIXES=1 turns on the exporter's `countersTotalSuffix` and `unitSuffix`.
 *
 * Effects: `pay` (applies; `{delayMs}` holds the account that long; `{failOnce: true}` loses the
 * response of its first attempt, so the key becomes uncertain), `probed` (always loses the
 * response; its probe finds it applied), `declined` (declared safe, always fails: not applied).
 */
import { fileURLToPath } from 'node:url';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import pg from 'pg';
import { defineEffect } from '../../src/activities/index.js';
import { PgStore } from '../../src/store/postgres/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { databaseUrl } from '../support/postgres.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE } from '../support/temporal.js';

const { SCHEMA, TASK_QUEUE, METRICS_ADDRESS, PROMETHEUS_SUFFIXES } = process.env;
if (!SCHEMA || !TASK_QUEUE || !METRICS_ADDRESS)
  throw new Error('SCHEMA, TASK_QUEUE, METRICS_ADDRESS are required');

Runtime.install({
  logger: new DefaultLogger('ERROR'),
  telemetryOptions: {
    metrics: {
      prometheus: {
        bindAddress: METRICS_ADDRESS,
        // The exporter's Prometheus-convention options, which rename series.
        ...(PROMETHEUS_SUFFIXES ? { countersTotalSuffix: true, unitSuffix: true } : {}),
      },
    },
  },
});

interface Payment {
  account: string;
  delayMs?: number;
  failOnce?: boolean;
}

const failed = new Set<string>();
const pool = new pg.Pool({ connectionString: databaseUrl() });
pool.on('error', () => {});
const plugin = new SideEffectPlugin({
  store: new PgStore({ pool, schema: SCHEMA }),
  ttlMs: 5_000,
  sweepEveryMs: 300,
  effects: {
    pay: defineEffect({
      resource: (input: Payment) => `account:${input.account}`,
      apply: async (input: Payment, { key }) => {
        if (input.delayMs) await new Promise((resolve) => setTimeout(resolve, input.delayMs));
        if (input.failOnce && !failed.has(key)) {
          failed.add(key);
          throw new Error('response lost');
        }
        return { paid: input.account };
      },
    }),
    probed: defineEffect({
      resource: (input: Payment) => `account:${input.account}`,
      apply: async () => {
        throw new Error('response lost');
      },
      probe: async (input: Payment) => ({ applied: true, result: { paid: input.account } }),
    }),
    declined: defineEffect({
      resource: (input: Payment) => `account:${input.account}`,
      retrySafety: 'safe',
      apply: async () => {
        throw new Error('card declined');
      },
    }),
  },
});
const connection = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
const worker = await Worker.create({
  connection,
  namespace: TEMPORAL_NAMESPACE,
  taskQueue: TASK_QUEUE,
  workflowsPath: fileURLToPath(new URL('./workflows.ts', import.meta.url)),
  plugins: [plugin],
});
process.stdout.write('READY\n');
process.on('SIGTERM', () => worker.shutdown());
await worker.run();
await connection.close();
await pool.end();
