/**
 * One sweeper per store: three workers share a PgStore schema with 200 uncertain keys
 * nobody retries. Whatever the workers' ticks, each key gets one ReconcileWorkflow start
 * in total, not one per key per tick per worker, and the leader starts them in bounded
 * parallel (at most 16 in flight).
 */
import { Client, Connection, type WorkflowClientInterceptor } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { reconcileWorkflowId, statusQuery } from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { testBundle, waitFor } from './harness.js';

const KEYS = 200;
const SWEEP_EVERY_MS = 1_000;

/** Every StartWorkflowExecution a worker's client sends, by workflow id. */
const starts = new Map<string, number>();
/** Starts in flight at once, and the most seen: a sweep starts its keys in bounded parallel. */
let inFlight = 0;
let mostInFlight = 0;
const countStarts: WorkflowClientInterceptor = {
  async startWithDetails(input, next) {
    starts.set(input.options.workflowId, (starts.get(input.options.workflowId) ?? 0) + 1);
    inFlight += 1;
    mostInFlight = Math.max(mostInFlight, inFlight);
    try {
      return await next(input);
    } finally {
      inFlight -= 1;
    }
  },
};

describe('one sweeper per store', () => {
  let db: FreshSchema;
  let connection: Connection;
  const stores: PgStore[] = [];
  const pools: pg.Pool[] = [];
  const natives: NativeConnection[] = [];
  const workers: Worker[] = [];
  const running: Promise<void>[] = [];
  const keys: string[] = [];

  beforeAll(async () => {
    db = await freshSchema('sweeper');
    await migrate(db.pool, { schema: db.schema });
    const seed = new PgStore({ pool: db.pool, schema: db.schema });
    const prefix = uniqueTaskQueue('sweep-key');
    for (let i = 0; i < KEYS; i += 1) {
      const action = { key: `${prefix}/${i}`, resource: `${prefix}/r${i}` };
      const grant = await seed.acquire(action, 60_000, { applying: true });
      if (grant.outcome !== 'granted') throw new Error(`seed ${i}: ${grant.outcome}`);
      await seed.markUncertain(action, grant.lease, 'worker died mid-apply');
      keys.push(action.key);
    }
    connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
    const taskQueue = uniqueTaskQueue('sweeper');
    const workflowBundle = await testBundle();
    for (let w = 0; w < 3; w += 1) {
      // Each worker as its own process would have it: its own pool, store and clients.
      const pool = new pg.Pool({ ...db.config, max: 4 });
      pool.on('error', () => {});
      pools.push(pool);
      const store = new PgStore({ pool, schema: db.schema });
      stores.push(store);
      const native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
      natives.push(native);
      const client = new Client({
        connection,
        namespace: TEMPORAL_NAMESPACE,
        interceptors: { workflow: [countStarts] },
      });
      const worker = await Worker.create({
        connection: native,
        namespace: TEMPORAL_NAMESPACE,
        taskQueue,
        workflowBundle,
        plugins: [
          new SideEffectPlugin({
            store,
            effects: {},
            ttlMs: 5_000,
            sweepEveryMs: SWEEP_EVERY_MS,
            client,
          }),
        ],
      });
      workers.push(worker);
      running.push(worker.run());
    }
  });

  afterAll(async () => {
    const client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
    await Promise.all(
      keys.map((key) =>
        client.workflow
          .getHandle(reconcileWorkflowId(key))
          .terminate('test finished')
          .catch(() => {}),
      ),
    );
    for (const worker of workers) worker.shutdown();
    await Promise.all(running);
    await Promise.all(stores.map((store) => store.close()));
    await Promise.all(pools.map((pool) => pool.end()));
    await Promise.all(natives.map((native) => native.close()));
    await connection?.close();
    await db?.drop();
  });

  it('3 workers, 200 uncertain keys: at most one start per key over the ticks, and every key gets its ReconcileWorkflow', async () => {
    await waitFor(
      () => (starts.size >= KEYS ? true : undefined),
      'a ReconcileWorkflow start for every key',
      120_000,
    );
    // Three more ticks of every worker after the last key was started.
    await new Promise((resolve) => setTimeout(resolve, 3.5 * SWEEP_EVERY_MS * 1.2));

    expect([...starts.keys()].sort()).toEqual(keys.map(reconcileWorkflowId).sort());
    expect(Math.max(...starts.values())).toBe(1);
    let total = 0;
    for (const count of starts.values()) total += count;
    expect(total).toBe(KEYS);
    // Not one after another, and not all 200 at once.
    expect(mostInFlight).toBeGreaterThan(1);
    expect(mostInFlight).toBeLessThanOrEqual(16);

    const client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
    const status = await waitFor(
      () =>
        client.workflow
          .getHandle(reconcileWorkflowId(keys[0]!))
          .query(statusQuery)
          .then((s) => (s.state === 'waiting' ? s : undefined))
          .catch(() => undefined),
      'the first key to wait for a person',
    );
    expect(status.reason).toBe('worker died mid-apply');
  }, 180_000);
});
