/**
 * `npm run bench`: the store bench, the hot-resource bench, then the Temporal bench, in one
 * process, and at the end one summary of every figure of the run with met/MISSED beside each
 * (progress lines go to stderr while it runs). The syncx bench runs before it, on its own (package.json).
 */
import { hotResourceBench } from './hot-resource.bench.js';
import { storeBench } from './store.bench.js';
import { type Figure, progress, summary } from './support/figures.js';
import { temporalBench } from './temporal.bench.js';

const started = performance.now();
const log = (line: string) => progress(started, line);
const figures: Figure[] = [];
const notes: string[] = [];
for (const bench of [storeBench, hotResourceBench, temporalBench]) {
  const report = await bench(log);
  figures.push(...report.figures);
  notes.push(...report.notes);
}
console.log(
  `\n${notes.join('\n')}\n\n${summary(figures)}\n(${((performance.now() - started) / 1000).toFixed(0)} s)`,
);
