/**
 * What a guarded side effect costs inside Temporal, guarded vs plain workflows in the same run,
 * same worker, against the local dev server, on PgStore (a fresh schema; MemoryStore, said so, if
 * Postgres does not answer):
 *
 * - throughput: WORKFLOWS workflows per variant with IN_FLIGHT running at once, in alternating
 *   rounds (guarded, plain, then plain, guarded); workflows per second, and the median of the
 *   rounds' guarded/plain ratios (each guarded round against the plain round beside it).
 *   Target >= 0.95. Many workflows in flight make the guard's cost visible instead of hiding it in the worker's
 *   task-polling quantum, so this figure can fail.
 * - time inside the activity, from its history events (ActivityTaskStarted -> Completed), for a
 *   sample of each variant's workflows: guarded minus plain at p50 and p95, in ms. Information.
 *
 *   ./temporal-dev.sh && npx tsx bench/temporal.bench.ts
 */
import { loadavg } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { defineEffect } from '../src/activities/index.js';
import type { Store } from '../src/core/store.js';
import { MemoryStore } from '../src/store/memory.js';
import { migrate, PgStore } from '../src/store/postgres/index.js';
import { SideEffectPlugin } from '../src/worker/index.js';
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
import { type BenchReport, median, percentile, progress, summary } from './support/figures.js';

const IN_FLIGHT = 200;
/** Paired rounds (guarded and plain, in alternating order): the dev server on a shared 2-core host runs a few workflows a second. */
const ROUNDS = 2;
/** Per variant: one wave of IN_FLIGHT workflows per round. */
const WORKFLOWS = Number(process.env.BENCH_WORKFLOWS) || ROUNDS * IN_FLIGHT;
const WARMUP = IN_FLIGHT / 4;
const HISTORY_SAMPLE = 150;
const TARGET_THROUGHPUT = 0.95;
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
    label: `PgStore (schema ${db.schema}, a pool of ${db.pool.options.max})`,
    close: () => db.drop(),
  };
}

/** Runs the Temporal bench. `log` gets a progress line per round. */
export async function temporalBench(log: (line: string) => void): Promise<BenchReport> {
  await ensureTemporalDevServer((line) => log(line));
  const { store, label, close } = await openStore();
  const connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  const client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
  const taskQueue = uniqueTaskQueue('bench-temporal');
  const native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
  const plugin = new SideEffectPlugin({
    client,
    store,
    ttlMs: 30_000,
    effects: {
      benchWrite: defineEffect({
        resource: (input: { n: number }) => `bench:${input.n}`,
        apply: (input: { n: number }) => work(input),
      }),
    },
    sweepEveryMs: 0,
  });
  const worker = await Worker.create({
    connection: native,
    namespace: TEMPORAL_NAMESPACE,
    taskQueue,
    activities: { plainWrite: work },
    workflowsPath: WORKFLOWS_PATH,
    plugins: [plugin],
  });
  const running = worker.run();

  let sequence = 0;
  const variants = {
    guarded: (n: number) =>
      client.workflow.start('guarded', {
        taskQueue,
        workflowId: `${taskQueue}-${++sequence}`,
        args: ['benchWrite', { n }],
      }),
    plain: (n: number) =>
      client.workflow.start('plain', {
        taskQueue,
        workflowId: `${taskQueue}-${++sequence}`,
        args: [{ n }],
      }),
  };
  type Variant = keyof typeof variants;

  /** Runs `count` workflows of one variant, `IN_FLIGHT` at a time; returns workflows/s and the handles. */
  const batch = async (name: Variant, count: number) => {
    const handles: WorkflowHandle[] = [];
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        while (next < count) {
          const handle = await variants[name](next++);
          await handle.result();
          handles.push(handle);
        }
      }),
    );
    return { rate: (count / (performance.now() - started)) * 1000, handles };
  };

  const rates: Record<Variant, number[]> = { guarded: [], plain: [] };
  const handles: Record<Variant, WorkflowHandle[]> = { guarded: [], plain: [] };
  const inActivity: Record<Variant, number[]> = { guarded: [], plain: [] };
  try {
    await batch('guarded', WARMUP);
    await batch('plain', WARMUP);
    for (let round = 0; round < ROUNDS; round++) {
      const order: Variant[] = round % 2 === 0 ? ['guarded', 'plain'] : ['plain', 'guarded'];
      for (const name of order) {
        const done = await batch(name, WORKFLOWS / ROUNDS);
        rates[name].push(done.rate);
        handles[name].push(...done.handles);
        log(`temporal: round ${round + 1}/${ROUNDS}, ${name} ${done.rate.toFixed(1)} wf/s`);
      }
    }
    for (const name of ['guarded', 'plain'] as const) {
      for (const handle of handles[name].slice(0, HISTORY_SAMPLE)) {
        inActivity[name].push(activityMs(await handle.fetchHistory()));
      }
    }
  } finally {
    worker.shutdown();
    await running;
    await native.close();
    await connection.close();
    await close();
  }

  const ratio = median(rates.guarded.map((rate, i) => rate / rates.plain[i]!));
  const g = inActivity.guarded;
  const p = inActivity.plain;
  const gap = (q: number) => percentile(g, q) - percentile(p, q);
  return {
    figures: [
      {
        bench: 'temporal',
        name: 'guarded / plain throughput',
        at: `${IN_FLIGHT} in flight`,
        value: ratio,
        target: { atLeast: TARGET_THROUGHPUT },
        detail: `${median(rates.guarded).toFixed(1)} / ${median(rates.plain).toFixed(1)} wf/s; in-activity time guarded - plain p50 ${gap(50).toFixed(1)} ms, p95 ${gap(95).toFixed(1)} ms`,
      },
    ],
    notes: [
      `temporal: ${WORKFLOWS} workflows per variant, ${IN_FLIGHT} in flight, ${ROUNDS} alternating rounds; store: ${label}; load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')} at the end`,
      `  rounds guarded ${rates.guarded.map((r) => r.toFixed(0)).join('/')} vs plain ${rates.plain.map((r) => r.toFixed(0)).join('/')} wf/s; in-activity time from ${g.length} + ${p.length} histories`,
    ],
  };
}

/** ActivityTaskStarted -> ActivityTaskCompleted of the workflow's one activity, by the server's clock. */
function activityMs(history: Awaited<ReturnType<WorkflowHandle['fetchHistory']>>): number {
  const at = (type: string) => {
    const event = history.events?.find(
      (e) =>
        (e.activityTaskStartedEventAttributes && type === 'started') ||
        (e.activityTaskCompletedEventAttributes && type === 'completed'),
    );
    const time = event?.eventTime;
    if (!time) throw new Error(`no activity ${type} event`);
    const seconds = time.seconds as unknown as { toNumber?: () => number } | number;
    const whole =
      typeof seconds === 'object' && seconds?.toNumber ? seconds.toNumber() : Number(seconds);
    return whole * 1000 + (time.nanos ?? 0) / 1e6;
  };
  return at('completed') - at('started');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const started = performance.now();
  const { figures, notes } = await temporalBench((line) => progress(started, line));
  console.log(`${notes.join('\n')}\n\n${summary(figures)}`);
}
