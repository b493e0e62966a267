/**
 * syncx throughput against the peers it replaces, in one process and one run:
 * fanInLimit vs p-map, Gate acquire/release vs p-limit, 100,000 trivial async tasks at
 * concurrency 8 and 64. Each measurement runs several times in alternating order and the
 * median counts. Prints whether the targets hold; never fails the run for missing one.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import pLimit from 'p-limit';
import pMap from 'p-map';
import { fanInLimit, Gate } from '../src/syncx/index.js';

const TASKS = 100_000;
const ROUNDS = 5;
const CONCURRENCIES = [8, 64] as const;

// The same trivial task everywhere: one real suspension, then the index.
async function task(i: number): Promise<number> {
  await Promise.resolve();
  return i;
}

const indices = Array.from({ length: TASKS }, (_, i) => i);

type Run = (concurrency: number) => Promise<number>;

const contenders: Record<string, Run> = {
  fanInLimit: async (c) => (await fanInLimit(TASKS, c, task)).length,
  'p-map': async (c) => (await pMap(indices, task, { concurrency: c })).length,
  Gate: async (c) => {
    const gate = new Gate(c);
    const guarded = async (i: number): Promise<number> => {
      const release = await gate.acquire();
      try {
        return await task(i);
      } finally {
        release();
      }
    };
    return (await Promise.all(indices.map(guarded))).length;
  },
  'p-limit': async (c) => {
    const limit = pLimit(c);
    return (await Promise.all(indices.map((i) => limit(task, i)))).length;
  },
};

const pairs = [
  { ours: 'fanInLimit', peer: 'p-map', target: 1.0 },
  { ours: 'Gate', peer: 'p-limit', target: 1.5 },
] as const;

// Every run starts from a collected heap, so no contender pays for the garbage of the one
// before it. Exposing gc at runtime keeps the plain `tsx bench/syncx.bench.ts` invocation.
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

async function timeOnce(run: Run, concurrency: number): Promise<number> {
  collectGarbage();
  await new Promise((resolve) => setImmediate(resolve));
  const start = performance.now();
  const done = await run(concurrency);
  const ms = performance.now() - start;
  if (done !== TASKS) throw new Error(`expected ${TASKS} results, got ${done}`);
  return (TASKS / ms) * 1000;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function measure(concurrency: number, a: string, b: string): Promise<[number, number]> {
  const runA = contenders[a]!;
  const runB = contenders[b]!;
  await timeOnce(runA, concurrency); // warm-up, not counted
  await timeOnce(runB, concurrency);
  const ratesA: number[] = [];
  const ratesB: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    // Alternate who goes first so GC debt and JIT state do not favour one side.
    if (round % 2 === 0) {
      ratesA.push(await timeOnce(runA, concurrency));
      ratesB.push(await timeOnce(runB, concurrency));
    } else {
      ratesB.push(await timeOnce(runB, concurrency));
      ratesA.push(await timeOnce(runA, concurrency));
    }
  }
  return [median(ratesA), median(ratesB)];
}

const fmt = (n: number): string => Math.round(n).toLocaleString('en-US');
const rows: string[][] = [];
let allMet = true;
for (const { ours, peer, target } of pairs) {
  for (const concurrency of CONCURRENCIES) {
    const [mine, theirs] = await measure(concurrency, ours, peer);
    const ratio = mine / theirs;
    const met = ratio >= target;
    allMet &&= met;
    rows.push([
      `${ours} vs ${peer}`,
      String(concurrency),
      fmt(mine),
      fmt(theirs),
      `${ratio.toFixed(2)}x`,
      `>= ${target.toFixed(1)}x`,
      met ? 'met' : 'MISSED',
    ]);
  }
}

const header = ['comparison', 'conc', 'ours tasks/s', 'peer tasks/s', 'ratio', 'target', ''];
const widths = header.map((h, col) => Math.max(h.length, ...rows.map((r) => r[col]!.length)));
const line = (cells: string[]): string => cells.map((c, col) => c.padEnd(widths[col]!)).join('  ');
console.log(
  `syncx bench: ${fmt(TASKS)} tasks, median of ${ROUNDS} alternating rounds, node ${process.version}`,
);
console.log(line(header));
console.log(line(widths.map((w) => '-'.repeat(w))));
for (const row of rows) console.log(line(row));
console.log(allMet ? 'all targets met' : 'some targets missed (reported, not enforced)');
