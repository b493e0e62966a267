/**
 * One worker process of the fault harness: a Worker with SideEffectPlugin on the run's task queue with PgStore and
 * PgFencedSink on the run's schema, reaching Postgres through the harness's cuttable proxy (its
 * backends carry `application_name` = APP_NAME so they can be terminated), the sweeper on.
 * Reports on stdout, one line each: READY, APPLY/WROTE/LOST/STALE <key> (from the effects),
 * CONTENDED <key> (an attempt turned away by a live lease).
 *
 *   SCHEMA=... DATABASE_URL=... APP_NAME=... TEMPORAL=127.0.0.1:P TASK_QUEUE=... BUNDLE=file \
 *   TTL_MS=1500 SWEEP_MS=1000 FENCED_PROBE=1 node --import tsx test/faults/worker.ts
 */
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import pg from 'pg';
import { SideEffectFailureType } from '../../src/protocol/failures.js';
import { PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { faultEffects } from './effects.js';

const env = process.env;
const required = ['SCHEMA', 'DATABASE_URL', 'APP_NAME', 'TEMPORAL', 'TASK_QUEUE', 'BUNDLE'];
for (const name of required) if (!env[name]) throw new Error(`${name} is required`);
const schema = env.SCHEMA!;

Runtime.install({ logger: new DefaultLogger('ERROR') });

const announce = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

const pool = new pg.Pool({
  connectionString: env.DATABASE_URL,
  application_name: env.APP_NAME,
  options: `-c search_path=${schema}`,
  max: 8,
  connectionTimeoutMillis: 3_000,
  // A connection black-holed by the proxy must not hang an operation forever.
  query_timeout: 10_000,
});
pool.on('error', () => {});
const store = new PgStore({ pool, schema });
const sink = new PgFencedSink({ pool, schema });

const connection = await NativeConnection.connect({ address: env.TEMPORAL! });
const worker = await Worker.create({
  connection,
  taskQueue: env.TASK_QUEUE!,
  workflowBundle: { codePath: env.BUNDLE! },
  identity: `${env.APP_NAME}@${process.pid}`,
  // A killed worker's sticky workflow tasks go back to the shared queue after 2 s, not 10.
  stickyQueueScheduleToStartTimeout: '2 seconds',
  interceptors: {
    activity: [
      () => ({
        inbound: {
          async execute(input, next) {
            try {
              return await next(input);
            } catch (error) {
              const failure = error as { type?: unknown; details?: Array<{ key?: string }> };
              if (failure.type === SideEffectFailureType.Contended)
                announce(`CONTENDED ${failure.details?.[0]?.key ?? '?'}`);
              throw error;
            }
          },
        },
      }),
    ],
  },
  plugins: [
    new SideEffectPlugin({
      store,
      effects: faultEffects({ pool, sink, store, announce, fencedProbe: env.FENCED_PROBE === '1' }),
      ttlMs: Number(env.TTL_MS ?? 1_500),
      sweepEveryMs: Number(env.SWEEP_MS ?? 1_000),
      minContendedDelayMs: 100,
    }),
  ],
});
process.on('SIGTERM', () => worker.shutdown());
announce('READY');
await worker.run();
await connection.close();
await pool.end().catch(() => {});
