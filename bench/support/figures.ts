/**
 * The figures a bench reports, each a ratio measured in one run against a peer measured in the
 * same run, with its target if it has one; and the summary `npm run bench` prints at the end, so
 * every figure of the run is read in one place with met or MISSED beside it. A bench never fails
 * on time: a missed target is printed, not thrown.
 */

/** One figure: `value` against `target` (a ratio the value must reach, or stay under). */
export interface Figure {
  /** Which bench measured it: 'store', 'temporal'. */
  bench: string;
  /** What over what, e.g. 'execute / 2 upserts'. */
  name: string;
  /** Where on the load axis, e.g. '32 callers', '200 in flight'. */
  at: string;
  value: number;
  target?: { atLeast: number } | { atMost: number };
  /** What the ratio is made of, for the reader (rates, CPU per op). */
  detail?: string;
}

/** What a bench returns: its figures, and the lines that say how they were measured. */
export interface BenchReport {
  figures: Figure[];
  notes: string[];
}

/** Whether the figure meets its target; undefined for a figure reported without one. */
function met(figure: Figure): boolean | undefined {
  const { target, value } = figure;
  if (!target) return undefined;
  return 'atLeast' in target ? value >= target.atLeast : value <= target.atMost;
}

function targetText(figure: Figure): string {
  const { target } = figure;
  if (!target) return 'reported';
  return 'atLeast' in target ? `>= ${target.atLeast}` : `<= ${target.atMost}`;
}

/** The figures as an aligned table, met or MISSED beside each, and how many targets were missed. */
export function summary(figures: readonly Figure[]): string {
  const header = ['bench', 'figure', 'at', 'value', 'target', '', 'detail'];
  const rows = figures.map((f) => {
    const ok = met(f);
    return [
      f.bench,
      f.name,
      f.at,
      f.value.toFixed(2),
      targetText(f),
      ok === undefined ? '' : ok ? 'met' : 'MISSED',
      f.detail ?? '',
    ];
  });
  const widths = header.map((h, col) => Math.max(h.length, ...rows.map((r) => r[col]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, col) => cell.padEnd(widths[col]!))
      .join('  ')
      .trimEnd();
  const missed = figures.filter((f) => met(f) === false).length;
  const targets = figures.filter((f) => f.target).length;
  return [
    line(header),
    line(widths.map((w) => '-'.repeat(w))),
    ...rows.map(line),
    missed === 0
      ? `all ${targets} targets met`
      : `${missed} of ${targets} targets MISSED (reported, not enforced)`,
  ].join('\n');
}

/** The median of a non-empty list (of an even count, the mean of the middle two). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const half = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[half]! : (sorted[half - 1]! + sorted[half]!) / 2;
}

/** The p-th percentile (nearest rank) of a non-empty list. */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** A progress line on stderr, with the seconds since the bench started. */
export function progress(started: number, line: string): void {
  process.stderr.write(`[${((performance.now() - started) / 1000).toFixed(0)} s] ${line}\n`);
}
