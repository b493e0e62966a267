/**
 * What a guarded side effect costs inside Temporal: p50/p95 latency of a workflow running one
 * guarded effect (sideEffect() -> effect activity -> Runner -> store) against the same work as a
 * plain activity, same worker, same run, against the local dev server. Workflows run one at a
 * time, interleaved (guarded, plain, plain, guarded, ...), after a warm-up. Uses PgStore on a
 * fresh schema when Postgres answers (DATABASE_URL or 127.0.0.1:5432), else MemoryStore, and
 * says which. Target: guarded/plain <= 1.15 at p50; printed, never fails the run.
 *
 *   ./temporal-dev.sh && npx tsx bench/temporal.bench.ts
 */
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { defineEffect } from '../src/activities/index.js';
import type { Store } from '../src/core/store.js';
import { MemoryStore } from '../src/store/memory.js';
import { migrate, PgStore } from '../src/store/postgres/index.js';
import { createWorker } from '../src/worker/index.js';
import {
  assertPostgresReachable,
  type FreshSchema,
  freshSchema,
} from '../test/support/postgres.js';
import {
  ensureTemporalDevServer,
  TEMPORAL_ADDRESS,
  TEMPORAL_NAMESPACE,
  uniqueTaskQueue,
} from '../test/support/temporal.js';

const WARMUP = 20;
const RUNS = 100;
const TARGET_P50_RATIO = 1.15;
const WORKFLOWS_PATH = fileURLToPath(new URL('../test/temporal/workflows.ts', import.meta.url));

Runtime.install({ logger: new DefaultLogger('WARN') });

/** The work both variants do: what a cheap downstream call costs (one timer tick). */
async function work(input: { n: number }): Promise<{ n: number }> {
  await new Promise((resolve) => setImmediate(resolve));
  return { n: input.n };
}

async function openStore(): Promise<{ store: Store; label: string; close(): Promise<void> }> {
  try {
    await assertPostgresReachable();
  } catch (error) {
    return {
      store: new MemoryStore(),
      label: `MemoryStore (Postgres unavailable: ${(error as Error).message.split('.')[0]})`,
      close: async () => {},
    };
  }
  const db: FreshSchema = await freshSchema('bench_temporal');
  await migrate(db.pool, { schema: db.schema });
  return {
    store: new PgStore({ pool: db.pool, schema: db.schema }),
    label: `PgStore (schema ${db.schema})`,
    close: () => db.drop(),
  };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function main(): Promise<void> {
  await ensureTemporalDevServer((line) => process.stderr.write(`${line}\n`));
  const { store, label, close } = await openStore();
  const connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  const client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
  const taskQueue = uniqueTaskQueue('bench-temporal');
  const worker = await createWorker({
    connection: await NativeConnection.connect({ address: TEMPORAL_ADDRESS }),
    client,
    namespace: TEMPORAL_NAMESPACE,
    taskQueue,
    store,
    ttlMs: 30_000,
    effects: {
      benchWrite: defineEffect({
        resource: (input: { n: number }) => `bench:${input.n}`,
        apply: (input: { n: number }) => work(input),
      }),
    },
    activities: { plainWrite: work },
    workflowsPath: WORKFLOWS_PATH,
    sweepEveryMs: 0,
  });
  const running = worker.run();

  let sequence = 0;
  const variants = {
    guarded: (n: number) =>
      client.workflow.execute('guarded', {
        taskQueue,
        workflowId: `${taskQueue}-${++sequence}`,
        args: ['benchWrite', { n }],
      }),
    plain: (n: number) =>
      client.workflow.execute('plain', {
        taskQueue,
        workflowId: `${taskQueue}-${++sequence}`,
        args: [{ n }],
      }),
  };
  const samples: Record<keyof typeof variants, number[]> = { guarded: [], plain: [] };
  try {
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const order: Array<keyof typeof variants> =
        i % 2 === 0 ? ['guarded', 'plain'] : ['plain', 'guarded'];
      for (const name of order) {
        const started = performance.now();
        await variants[name](i);
        if (i >= WARMUP) samples[name].push(performance.now() - started);
      }
    }
  } finally {
    worker.shutdown();
    await running;
    await connection.close();
    await close();
  }

  const stats = Object.fromEntries(
    Object.entries(samples).map(([name, values]) => {
      const sorted = [...values].sort((a, b) => a - b);
      return [name, { p50: percentile(sorted, 50), p95: percentile(sorted, 95) }];
    }),
  ) as Record<keyof typeof variants, { p50: number; p95: number }>;
  const ratio50 = stats.guarded.p50 / stats.plain.p50;
  const ratio95 = stats.guarded.p95 / stats.plain.p95;
  console.log(
    `temporal.bench: ${RUNS} sequential workflows per variant (after ${WARMUP} warm-up), store: ${label}`,
  );
  for (const [name, { p50, p95 }] of Object.entries(stats)) {
    console.log(
      `  ${name.padEnd(8)} p50 ${p50.toFixed(1).padStart(7)} ms   p95 ${p95.toFixed(1).padStart(7)} ms`,
    );
  }
  console.log(`  guarded/plain  p50 ${ratio50.toFixed(3)}x   p95 ${ratio95.toFixed(3)}x`);
  console.log(
    `  target p50 <= ${TARGET_P50_RATIO}x: ${ratio50 <= TARGET_P50_RATIO ? 'met' : 'NOT met'}`,
  );
}

await main();
