/**
 * A worker process for the crash test: runs only the guarded `deposit` activity on its own task
 * queue, with PgStore on the test's schema. After the ledger row is committed it prints
 * `WROTE <key>` and hangs inside apply (lease still renewed), so the parent can SIGKILL it there.
 *
 *   SCHEMA=... TASK_QUEUE=... RECONCILE_QUEUE=... node --import tsx test/temporal/crash-worker.ts
 */
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import pg from 'pg';
import { createSideEffectActivities } from '../../src/activities/index.js';
import { PgStore } from '../../src/store/postgres/index.js';
import { databaseUrl } from '../support/postgres.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE } from '../support/temporal.js';
import { pgEffects } from './pg-effects.js';

const { SCHEMA, TASK_QUEUE, RECONCILE_QUEUE, TTL_MS } = process.env;
if (!SCHEMA || !TASK_QUEUE || !RECONCILE_QUEUE || !TTL_MS)
  throw new Error('SCHEMA, TASK_QUEUE, RECONCILE_QUEUE, TTL_MS are required');

Runtime.install({ logger: new DefaultLogger('WARN') });
const pool = new pg.Pool({ connectionString: databaseUrl(), options: `-c search_path=${SCHEMA}` });
const connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
const worker = await Worker.create({
  connection: await NativeConnection.connect({ address: TEMPORAL_ADDRESS }),
  namespace: TEMPORAL_NAMESPACE,
  taskQueue: TASK_QUEUE,
  activities: createSideEffectActivities({
    store: new PgStore({ pool, schema: SCHEMA }),
    effects: pgEffects({
      pool,
      schema: SCHEMA,
      afterWrite: async (key) => {
        process.stdout.write(`WROTE ${key}\n`);
        await new Promise(() => {});
      },
    }),
    ttlMs: Number(TTL_MS),
    client: new Client({ connection, namespace: TEMPORAL_NAMESPACE }),
    taskQueue: RECONCILE_QUEUE,
  }),
});
process.stdout.write('READY\n');
await worker.run();
