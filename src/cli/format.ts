import { decodeJson } from '../core/json.js';
import type { KeyEvent, KeyRecord } from '../core/types.js';

/** Human output: aligned columns a person can scan; `--json` is for scripts. */
export function printList(records: KeyRecord[]): string {
  if (records.length === 0) return 'no keys';
  const rows = records.map((r) => [
    r.state,
    String(r.fence),
    iso(r.updatedAt),
    r.key,
    r.resource,
    r.reason ?? '',
  ]);
  return table(['STATE', 'FENCE', 'UPDATED', 'KEY', 'RESOURCE', 'REASON'], rows);
}

export function printKey(record: KeyRecord, events: KeyEvent[]): string {
  const lines = [
    `key:          ${record.key}`,
    `resource:     ${record.resource}`,
    `state:        ${record.state}`,
    `fence:        ${record.fence}`,
    `retrySafety:  ${record.retrySafety}`,
    `updated:      ${iso(record.updatedAt)}`,
  ];
  if (record.reason) lines.push(`reason:       ${record.reason}`);
  if (record.result) lines.push(`result:       ${safeResult(record.result.payload)}`);
  if (record.state === 'uncertain') {
    lines.push(
      '',
      `next: sideeffect resolve '${record.key}' --applied|--not-applied --reason "what you checked"`,
    );
  }
  lines.push('', 'history:');
  const rows = events.map((e) => [
    iso(e.at),
    `${e.from} -> ${e.to}`,
    String(e.fence),
    e.actor,
    e.reason,
  ]);
  lines.push(table(['AT', 'TRANSITION', 'FENCE', 'BY', 'REASON'], rows));
  return lines.join('\n');
}

function safeResult(payload: Uint8Array): string {
  try {
    return JSON.stringify(decodeJson({ payload }));
  } catch {
    return `${payload.length} bytes (not JSON)`;
  }
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

function table(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(head), ...rows.map(line)].join('\n');
}
