/**
 * A duration as people write it and as the library's options take it: a number of milliseconds,
 * an `ms`-style value (`'30s'`, `'1 hour'`, `'2 days'`) or a sum of them (`'1h30m'`,
 * `'1 hour 30 minutes'`). One reader for the workflow helper and the CLI, so an operator never
 * learns a second format. Undefined for anything else (a negative or empty value included).
 */
export function parseDuration(duration: number | string): number | undefined {
  if (typeof duration === 'number') return Number.isFinite(duration) ? duration : undefined;
  const text = duration.trim().toLowerCase();
  if (/^\d+(?:\.\d+)?$/.test(text)) return Number(text);
  const part =
    /(\d+(?:\.\d+)?)\s*(milliseconds?|msecs?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|w)\s*/y;
  let total = 0;
  let matched = 0;
  part.lastIndex = 0;
  while (part.lastIndex < text.length) {
    const match = part.exec(text);
    if (!match) return undefined;
    total += Number(match[1]) * UNIT_MS[unitOf(match[2]!)]!;
    matched += 1;
  }
  return matched > 0 ? total : undefined;
}

const UNIT_MS: Record<string, number> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

function unitOf(unit: string): string {
  if (unit.startsWith('ms') || unit.startsWith('milli')) return 'ms';
  return unit[0]!;
}
