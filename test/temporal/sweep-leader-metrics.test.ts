/**
 * Backlog gauges come only from the current sweep leader. Two worker processes (each its own
 * Runtime and Prometheus endpoint, with the exporter's `countersTotalSuffix` and `unitSuffix`)
 * share a store holding three uncertain keys: one leads and reports them, the other reports
 * nothing. When the leader's lock session is killed, the old leader drops to 0 and whoever
 * leads next reports the backlog, so `max` over the processes stays the store's count. The
 * README's alert expressions name series these processes really export under those options.
 */
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { sweepLockKey } from '../../src/store/postgres/sweep-leader.js';
import { reconcileWorkflowId, resolveSignal } from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { waitFor } from './harness.js';
import {
  alertMetricNames,
  type MetricsWorker,
  type Sample,
  scrape,
  startMetricsWorker,
  total,
} from './prometheus.js';

const OPEN = 'sideeffect_uncertain_open';
/** The advisory lock class PgStore's sweep leadership uses (its key is hashtext(schema)). */

let db: FreshSchema;
let connection: Connection;
let client: Client;
const workers: MetricsWorker[] = [];
const taskQueue = uniqueTaskQueue('leader-metrics');
const keys: string[] = [];

beforeAll(async () => {
  db = await freshSchema('leader_metrics');
  await migrate(db.pool, { schema: db.schema });
  const store = new PgStore({ pool: db.pool, schema: db.schema });
  for (let i = 0; i < 3; i += 1) {
    const action = { key: `${taskQueue}/k${i}`, resource: `${taskQueue}/r${i}` };
    const grant = await store.acquire(action, 60_000, { applying: true });
    if (grant.outcome !== 'granted') throw new Error(`seed ${i}: ${grant.outcome}`);
    await store.markUncertain(action, grant.lease, 'worker died mid-apply');
    keys.push(action.key);
  }
  const env = { SCHEMA: db.schema, TASK_QUEUE: taskQueue, PROMETHEUS_SUFFIXES: '1' };
  workers.push(...(await Promise.all([startMetricsWorker(env), startMetricsWorker(env)])));
  connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
}, 180_000);

afterAll(async () => {
  for (const id of [...keys.map(reconcileWorkflowId), `${taskQueue}-pay`]) {
    await client?.workflow
      .getHandle(id)
      .terminate('test file finished')
      .catch(() => {});
  }
  await Promise.all(workers.map((worker) => worker.stop()));
  await connection?.close();
  await db?.drop();
});

/** Each process's uncertain_open (0 when it never reported), in worker order. */
async function openByWorker(): Promise<number[]> {
  return Promise.all(workers.map(async (worker) => total(await scrape(worker.url), OPEN)));
}

/** The store's own count of uncertain keys. */
async function storeBacklog(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `select count(*)::int as n from ${db.schema}.keys where state = 'uncertain'`,
  );
  return rows[0]!.n;
}

describe('backlog gauges', () => {
  it('come only from the sweep leader, and a leader whose lock session dies drops to 0', async () => {
    const first = await waitFor(async () => {
      const open = await openByWorker();
      return open.filter((value) => value === 3).length === 1 && open.includes(0)
        ? open
        : undefined;
    }, 'one worker to report the three uncertain keys and the other none');
    const leader = first.indexOf(3);

    // The test queues for the lock before killing the leader's session, so it is next in line:
    // while it holds the lock no worker leads, and each must report 0.
    // A one-bigint advisory lock shows in pg_locks as its high and low 32 bits (objsubid 1).
    const key = sweepLockKey(db.schema);
    const bits = BigInt.asUintN(64, BigInt(key));
    const holder = await db.pool.connect();
    try {
      const { rows } = await db.pool.query<{ pid: number }>(
        `select pid from pg_locks
          where locktype = 'advisory' and granted and objsubid = 1
            and classid = $1::bigint::oid and objid = $2::bigint::oid`,
        [String(bits >> 32n), String(bits & 0xffffffffn)],
      );
      expect(rows).toHaveLength(1);
      const queued = holder.query('select pg_advisory_lock($1::bigint)', [key]);
      const waiting = `select 1 from pg_locks where locktype = 'advisory' and not granted and pid = $1`;
      const pid = (holder as unknown as { processID: number }).processID;
      await waitFor(
        async () => ((await db.pool.query(waiting, [pid])).rowCount ? true : undefined),
        'the test to queue for the sweep lock',
      );
      await db.pool.query('select pg_terminate_backend($1)', [rows[0]!.pid]);
      await queued;
      await waitFor(async () => {
        const open = await openByWorker();
        return open[leader] === 0 && open.every((value) => value === 0) ? true : undefined;
      }, 'the old leader, and everyone, to report 0 while nobody leads');
      await holder.query('select pg_advisory_unlock($1::bigint)', [key]);
    } finally {
      holder.release();
    }
    const after = await waitFor(async () => {
      const open = await openByWorker();
      return open.filter((value) => value === 3).length === 1 && open.includes(0)
        ? open
        : undefined;
    }, 'one worker to lead and report the backlog again');
    expect(Math.max(...after)).toBe(await storeBacklog());
  });

  it('the README alert expressions name series exported under countersTotalSuffix and unitSuffix', async () => {
    // Move every series: an applied call, and a verdict on one of the waiting keys.
    const pay = await client.workflow.start('guarded', {
      taskQueue,
      workflowId: `${taskQueue}-pay`,
      args: ['pay', { account: 'suffixes' }],
    });
    await pay.result();
    await waitFor(async () => {
      try {
        await client.workflow.getHandle(reconcileWorkflowId(keys[0]!)).signal(resolveSignal, {
          applied: false,
          reason: 'not in the bank export',
          by: 'ops',
          attempt: 'any',
        });
        return true;
      } catch {
        return undefined;
      }
    }, 'the reconcile to take a verdict');
    const { names, counters } = alertMetricNames();
    const expected = names.map((name) => (counters.has(name) ? `${name}_total` : name));
    const exported = await waitFor(
      async () => {
        const samples: Sample[] = (await Promise.all(workers.map((w) => scrape(w.url)))).flat();
        const seen = new Set(samples.map((sample) => sample.name));
        return expected.every((name) => seen.has(name)) &&
          seen.has('sideeffect_time_to_resolution_seconds_count')
          ? seen
          : undefined;
      },
      `${expected.join(', ')} to be exported`,
    );
    // Every counter of the metrics table, so each alert on one of them is read with `_total`.
    expect([...counters].sort()).toEqual([
      'sideeffect_breaker_transitions',
      'sideeffect_outcomes',
      'sideeffect_pending_verdicts_refused',
      'sideeffect_reconciles_opened',
      'sideeffect_reconciles_resolved',
      'sideeffect_verdicts_refused',
    ]);
    // The histogram keeps its name under unitSuffix: no `_s` appended.
    expect(
      [...exported].filter((name) => /^sideeffect_.*_s_(bucket|sum|count)$/.test(name)),
    ).toEqual([]);
  });
});
