import type { BreakerRecord } from '../../core/breaker.js';
import { defineCommand } from '../command.js';
import { iso } from '../format.js';
import { EXIT } from '../usage.js';

/** `sideeffect breakers`: every provider group's breaker, so a person sees an outage being held off. */
export const breakers = defineCommand({
  name: 'breakers',
  summary: 'every breaker: open, half-open or closed, since when, why, and who moved it',
  usage: ['sideeffect breakers [-o json]'],
  about: `From the store: every provider group's breaker (docs/operations.md, "Outages"): its state and
since when, the uncertain outcomes counted in its window, when one attempt may next go through
(half-open), and who opened or closed it and why (breaker: the thresholds; else the person).`,
  options: {},
  parse: () => ({}),
  async run(_, ctx) {
    const found = await ctx.database().store.breakers();
    ctx.print(printBreakers(found), found.map(jsonBreaker));
    return EXIT.ok;
  },
});

function printBreakers(records: BreakerRecord[]): string {
  if (records.length === 0)
    return 'no breakers yet (none of the groups has had an uncertain outcome)';
  const rows = records.map((b) => [
    b.group,
    b.state,
    iso(b.since),
    String(b.uncertainInWindow),
    b.nextHalfOpenAt === undefined ? '-' : iso(b.nextHalfOpenAt),
    b.manual ? `${b.by} (person)` : b.by,
    b.reason,
  ]);
  const header = ['GROUP', 'STATE', 'SINCE', 'UNCERTAIN', 'NEXT HALF-OPEN', 'BY', 'REASON'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ');
  return [line(header), ...rows.map(line)].join('\n');
}

/** A breaker as JSON: times as ISO-8601, as everywhere in the CLI's output. */
export function jsonBreaker(record: BreakerRecord) {
  const { since, nextHalfOpenAt, ...rest } = record;
  return {
    ...rest,
    since: iso(since),
    ...(nextHalfOpenAt === undefined ? {} : { nextHalfOpenAt: iso(nextHalfOpenAt) }),
  };
}
