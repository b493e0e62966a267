/**
 * syncx throughput in one process and one run, 100,000 trivial async tasks at concurrency 8
 * and 64: settleAll vs p-map (target >= 1.0x), and Gate acquire/release vs the same code with
 * no gate at all (target >= 0.9x: within 10% of that ceiling, which no gate can beat; p-limit
 * shown for information). Each measurement runs several times, alternating which side goes
 * first, from a freshly collected heap; the median counts. Prints whether each target holds
 * and never fails the run for missing one.
 */
import { loadavg } from 'node:os';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import pLimit from 'p-limit';
import pMap from 'p-map';
import { Gate, settleAll } from '../src/syncx/index.js';

const TASKS = 100_000;
const ROUNDS = 7;
const CONCURRENCIES = [8, 64] as const;

// The same trivial task everywhere: one real suspension, then the index.
async function task(i: number): Promise<number> {
  await Promise.resolve();
  return i;
}

const indices = Array.from({ length: TASKS }, (_, i) => i);

/** Runs all tasks at the given concurrency and returns how many results came back. */
type Contender = (concurrency: number) => Promise<number>;

const contenders = {
  settleAll: async (c) => (await settleAll(TASKS, task, { concurrency: c })).length,
  'p-map': async (c) => (await pMap(indices, task, { concurrency: c })).length,
  // Same shape as p-limit: every task is submitted up front and waits its turn.
  'Gate acquire/release': async (c) => {
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
  // The Gate row's code with the gate taken out: no limit, every acquire already granted.
  // No gate can beat it in this shape: what is left is the caller's own async wrapper and the
  // garbage collector, so the Gate is judged against it.
  'no gate (ceiling)': async () => {
    const granted = Promise.resolve(() => {});
    const unguarded = async (i: number): Promise<number> => {
      const release = await granted;
      try {
        return await task(i);
      } finally {
        release();
      }
    };
    return (await Promise.all(indices.map(unguarded))).length;
  },
  // A different shape p-limit has no API for: wait for a slot before starting the next task,
  // so at most `c` tasks exist at once. Shown for information only.
  'Gate acquire before start': async (c) => {
    const gate = new Gate(c);
    const results = new Array<number>(TASKS);
    let stored = 0;
    for (let i = 0; i < TASKS; i++) {
      const release = await gate.acquire();
      task(i).then((value) => {
        results[i] = value;
        stored++;
        release();
      });
    }
    await Promise.all(Array.from({ length: c }, () => gate.acquire()));
    return stored;
  },
} satisfies Record<string, Contender>;

type Name = keyof typeof contenders;
const comparisons: { ours: Name; peer: Name; target?: number }[] = [
  { ours: 'settleAll', peer: 'p-map', target: 1.0 },
  { ours: 'Gate acquire/release', peer: 'no gate (ceiling)', target: 0.9 },
  { ours: 'Gate acquire/release', peer: 'p-limit' },
  { ours: 'no gate (ceiling)', peer: 'p-limit' },
  { ours: 'Gate acquire before start', peer: 'p-limit' },
];

// Each run starts from a collected heap, so no side pays for the garbage of the one before.
// Exposing gc at runtime keeps the plain `tsx bench/syncx.bench.ts` invocation.
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

async function tasksPerSecond(run: Contender, concurrency: number): Promise<number> {
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

async function measure(concurrency: number, a: Contender, b: Contender): Promise<[number, number]> {
  await tasksPerSecond(a, concurrency); // warm-up, not counted
  await tasksPerSecond(b, concurrency);
  const ratesA: number[] = [];
  const ratesB: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    // Alternate who goes first so JIT and heap state do not favour one side.
    if (round % 2 === 0) {
      ratesA.push(await tasksPerSecond(a, concurrency));
      ratesB.push(await tasksPerSecond(b, concurrency));
    } else {
      ratesB.push(await tasksPerSecond(b, concurrency));
      ratesA.push(await tasksPerSecond(a, concurrency));
    }
  }
  return [median(ratesA), median(ratesB)];
}

const fmt = (n: number): string => Math.round(n).toLocaleString('en-US');
const rows: string[][] = [];
let missed = 0;
for (const { ours, peer, target } of comparisons) {
  for (const concurrency of CONCURRENCIES) {
    const [mine, theirs] = await measure(concurrency, contenders[ours], contenders[peer]);
    const ratio = mine / theirs;
    const met = target === undefined || ratio >= target;
    if (!met) missed++;
    rows.push([
      ours,
      peer,
      String(concurrency),
      fmt(mine),
      fmt(theirs),
      `${ratio.toFixed(2)}x`,
      target === undefined ? 'info' : `>= ${target.toFixed(1)}x`,
      target === undefined ? '' : met ? 'met' : 'MISSED',
    ]);
  }
}

const header = ['syncx', 'peer', 'conc', 'syncx tasks/s', 'peer tasks/s', 'ratio', 'target', ''];
const widths = header.map((h, col) => Math.max(h.length, ...rows.map((r) => r[col]!.length)));
const line = (cells: string[]): string =>
  cells
    .map((c, col) => c.padEnd(widths[col]!))
    .join('  ')
    .trimEnd();
console.log(
  `syncx bench: ${fmt(TASKS)} tasks per run, median of ${ROUNDS} alternating runs, node ${process.version}, load average ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
console.log(line(header));
console.log(line(widths.map((w) => '-'.repeat(w))));
for (const row of rows) console.log(line(row));
console.log(
  missed === 0 ? 'all targets met' : `${missed} target(s) missed (reported, not enforced)`,
);
