/**
 * test/timings.json: how long each test file took in a measured run, slowest first. vitest.config.ts
 * starts files in that order, so the slow ones overlap the many short ones instead of starting
 * late and running on alone; `npm run test:timings` (test/support/timings-reporter.ts) refreshes
 * it from a run instead of a hand-kept list. A missing or unreadable file only loses the order.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';

export const TIMINGS_FILE = 'test/timings.json';

/** One test file's time: `ms` from its last passing measured run, absent if never measured. */
export interface FileTiming {
  file: string;
  ms?: number;
}

export interface Timings {
  /** When a run last refreshed the file (ISO-8601). */
  measuredAt?: string;
  /** Slowest first; files never measured after the measured ones. */
  files: FileTiming[];
}

/** The timings in `root`, or none when the file is missing or not what this module writes. */
export function readTimings(root: string): Timings {
  const file = path.join(root, TIMINGS_FILE);
  if (!existsSync(file)) return { files: [] };
  try {
    const parsed = JSON.parse(readFileSync(file, 'utf8')) as Timings;
    if (!Array.isArray(parsed.files)) throw new Error('no "files" list');
    return {
      ...parsed,
      files: parsed.files.filter((entry): entry is FileTiming => typeof entry?.file === 'string'),
    };
  } catch (error) {
    console.warn(`${TIMINGS_FILE} is unreadable (${String(error)}): files run in vitest's order`);
    return { files: [] };
  }
}

/**
 * The timings after a run that measured `measured` (file -> ms): a measured file takes its new
 * time, the others keep theirs (a partial run refreshes only what it ran), files that no longer
 * exist go, and the list is sorted slowest first again.
 */
export function mergeTimings(
  previous: Timings,
  measured: ReadonlyMap<string, number>,
  exists: (file: string) => boolean,
  measuredAt: string,
): Timings {
  const byFile = new Map(previous.files.map((entry) => [entry.file, entry]));
  for (const [file, ms] of measured) byFile.set(file, { file, ms: Math.round(ms) });
  const files = [...byFile.values()]
    .filter((entry) => exists(entry.file))
    .sort((a, b) => (b.ms ?? -1) - (a.ms ?? -1));
  return { ...previous, measuredAt, files };
}

/** One file as a run left it: its time, and its state (only a passed file's time is kept). */
export interface RunTiming {
  file: string;
  ms: number;
  /** vitest's: `passed`, `failed`, `skipped`, ... */
  state: string;
}

/**
 * What `npm run test:timings` prints at the end: the ten slowest files of this run and the total,
 * summed over the files (what three parallel files share) and as the run's wall-clock time.
 */
export function timingsSummary(run: readonly RunTiming[], wallMs: number): string {
  const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  const slowest = [...run].sort((a, b) => b.ms - a.ms).slice(0, 10);
  const width = Math.max(0, ...slowest.map((entry) => seconds(entry.ms).length));
  const summed = run.reduce((sum, entry) => sum + entry.ms, 0);
  const failed = run.filter((entry) => entry.state === 'failed').length;
  return [
    `the ${slowest.length} slowest of ${run.length} files:`,
    ...slowest.map(
      (entry) =>
        `  ${seconds(entry.ms).padStart(width)}  ${entry.file}${entry.state === 'passed' ? '' : ` (${entry.state})`}`,
    ),
    `total: ${seconds(summed)} summed over ${run.length} files${failed ? ` (${failed} failed)` : ''}, ${seconds(wallMs)} wall-clock`,
  ].join('\n');
}
