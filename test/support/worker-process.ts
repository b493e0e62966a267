/**
 * What the multi-process Postgres tests share: a worker script forked under tsx that reports its
 * counts once over IPC, and the small deterministic PRNG each worker draws from, so a failing run
 * can be replayed from its seed.
 */
import { fork } from 'node:child_process';
import type { Execution } from '../../src/core/index.js';

/** Forks `script` with `config` as its JSON argument; its one IPC message once it exits 0. */
export function runReportingWorker<R, C extends { worker: number } = { worker: number }>(
  script: string,
  config: C,
): Promise<R> {
  return new Promise((resolve, reject) => {
    const child = fork(script, [JSON.stringify(config)], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let report: R | undefined;
    child.on('message', (message) => {
      report = message as R;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0 && report) resolve(report);
      else reject(new Error(`worker ${config.worker} exited with ${code}`));
    });
  });
}

/** An xorshift32 generator in [0, 1) from `seed`. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 4294967296;
  };
}

/** What every worker counts of its executes' outcomes. */
export interface OutcomeCounts {
  applied: number;
  replayed: number;
  uncertain: number;
  contended: number;
  failed: number;
  storeErrors: number;
  /** The first store error thrown, for the printed counts. */
  storeErrorSample?: string;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Counts one execute's answer (or the store error it threw) and waits before a retry: whether the
 * key has ended (applied, replayed or uncertain).
 */
export async function counted(
  counts: OutcomeCounts,
  execute: () => Promise<Execution>,
  random: () => number,
): Promise<boolean> {
  let execution: Execution;
  try {
    execution = await execute();
  } catch (error) {
    counts.storeErrors += 1;
    counts.storeErrorSample ??= String(error);
    await sleep(5);
    return false;
  }
  switch (execution.outcome) {
    case 'applied':
    case 'replayed':
    case 'uncertain':
      counts[execution.outcome] += 1;
      return true;
    case 'contended':
      counts.contended += 1;
      await sleep(Math.min(execution.retryAfterMs, 20) + random() * 10);
      return false;
    case 'failed':
      counts.failed += 1;
      return false;
  }
}

/**
 * Works through keys 0..count-1 in a shuffled order on `lanes` concurrent callers; the indices
 * whose `run` never ended them.
 */
export async function workThrough(
  count: number,
  lanes: number,
  random: () => number,
  run: (index: number) => Promise<boolean>,
): Promise<number[]> {
  const order = Array.from({ length: count }, (_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const unfinished: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: lanes }, async () => {
      while (next < order.length) {
        const index = order[next++]!;
        if (!(await run(index))) unfinished.push(index);
      }
    }),
  );
  return unfinished;
}
