/**
 * A hot resource against the rest (issue 31): the latency of effects on unrelated resources while
 * 80 callers drive effects on one resource that long transactional effects hold in turn, through
 * one store on a pool of 10, against the same effects with nothing hot, in the same run
 * (test/faults/hot-resource-lane.ts; the test of that file checks the counts). Without the bound
 * in the process the unrelated effects queued behind the waiters for several lock bounds; the
 * target is under twice idle, p50 and p99. Never fails on time: each figure is printed with its
 * target and met/MISSED.
 *
 * Run alone: npx tsx bench/hot-resource.bench.ts   (DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test)
 */
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { migrate } from '../src/store/postgres/index.js';
import { quantile, runHotResourceLane } from '../test/faults/hot-resource-lane.js';
import { type BenchReport, type Figure, progress, summary } from './support/figures.js';

const DATABASE_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
/** Unrelated effects while hot may take at most this many times their idle latency. */
const TARGET = 2;
const ROUNDS = 3;

export async function hotResourceBench(log: (line: string) => void): Promise<BenchReport> {
  const schema = `sideeffect_bench_hot_${randomBytes(3).toString('hex')}`;
  const config: pg.PoolConfig = {
    connectionString: DATABASE_URL,
    options: `-c search_path=${schema}`,
  };
  const pool = new pg.Pool(config);
  pool.on('error', () => {});
  try {
    await migrate(pool, { schema });
    log('hot resource: the lane runs');
    const lane = await runHotResourceLane(
      { config, schema, pool },
      {
        rounds: ROUNDS,
        holdRuns: 8,
        busySamples: 60,
      },
    );
    const figures: Figure[] = ([0.5, 0.99] as const).map((q) => {
      const [busy, idle] = [quantile(lane.busy, q), quantile(lane.idle, q)];
      const name = `unrelated execute p${q * 100} latency, hot resource / idle`;
      const figure: Figure = {
        bench: 'hot resource',
        name,
        at: '80 callers, pool of 10',
        value: busy / idle,
        target: { atMost: TARGET },
        detail: `${busy.toFixed(1)} / ${idle.toFixed(1)} ms (${lane.busy.length} + ${lane.idle.length} effects); at most ${lane.mostWaiting} connection(s) waited on the hot row`,
      };
      log(`hot resource: ${name}: ${figure.value.toFixed(2)} (${figure.detail})`);
      return figure;
    });
    const notes = [
      `hot resource: ${ROUNDS} rounds, idle effects before and after each; load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')} at the end`,
    ];
    return { figures, notes };
  } finally {
    await pool.query(`drop schema if exists "${schema}" cascade`).catch(() => {});
    await pool.end();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const started = performance.now();
  const { figures, notes } = await hotResourceBench((line) => progress(started, line));
  console.log(`${notes.join('\n')}\n\n${summary(figures)}`);
}
