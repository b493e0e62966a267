import { decodeJson } from '../core/json.js';
import type { KeyEvent, KeyRecord, Result } from '../core/types.js';
import type { PendingVerdict } from '../core/verdict.js';
import type { StoreStats } from '../store/postgres/admin.js';

/**
 * Human output: aligned columns a person can scan; `--json` is for scripts. A PENDING column
 * (verdicts pending on the key's attempt) appears when some listed key has one.
 */
export function printList(records: KeyRecord[], pending = new Map<string, number>()): string {
  if (records.length === 0) return 'no keys';
  const shown = records.some((r) => pending.has(r.key));
  const rows = records.map((r) => [
    r.state,
    String(r.fence),
    ...(shown ? [String(pending.get(r.key) ?? '')] : []),
    iso(r.updatedAt),
    r.key,
    r.resource,
    r.reason ?? '',
  ]);
  const head = ['STATE', 'FENCE', ...(shown ? ['PENDING'] : []), 'UPDATED', 'KEY', 'RESOURCE'];
  return table([...head, 'REASON'], rows);
}

export function printKey(
  record: KeyRecord,
  events: KeyEvent[],
  pending: PendingVerdict[] = [],
  morePending?: number,
): string {
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
    const key = shellWord(record.key);
    lines.push(
      '',
      `next: check the attempt with fence ${record.fence} downstream, then one of:`,
      `  sideeffect resolve ${key} --fence ${record.fence} --not-applied --reason "what you checked"`,
      `  sideeffect resolve ${key} --fence ${record.fence} --applied --result JSON --reason "what you checked"`,
    );
  }
  lines.push('', 'history:');
  const rows = events.map((e) => [
    iso(e.at),
    `${e.from} -> ${e.to}`,
    String(e.fence),
    e.by,
    e.reason,
  ]);
  const history = table(['AT', 'TRANSITION', 'FENCE', 'BY', 'REASON'], rows).split('\n');
  lines.push(history[0]!);
  events.forEach((event, i) => {
    lines.push(history[i + 1]!);
    const who = whoDecided(event);
    if (who) lines.push(`    ${who}`);
  });
  if (pending.length > 0) lines.push('', ...printPending(pending));
  if (morePending !== undefined)
    lines.push(
      `more pending verdicts: sideeffect show ${shellWord(record.key)} --verdicts-after ${morePending}`,
    );
  const waiting = pending.filter((v) => v.state === 'pending');
  if (waiting.length > 0)
    lines.push(
      '',
      `a verdict sent through the workflow is refused while #${waiting.map((v) => v.id).join(', #')} ${waiting.length === 1 ? 'is' : 'are'} pending; withdraw a wrong one: sideeffect withdraw ${shellWord(record.key)} --verdict ID --reason TEXT`,
    );
  return lines.join('\n');
}

/**
 * Under a verdict: how far each name of who decided can be trusted. `by` and the Temporal identity
 * are whatever the sender declared (the `temporal` CLI's `--identity` sets any); the database user
 * is the role Postgres authenticated for the session that wrote the row.
 */
function whoDecided(event: KeyEvent): string | undefined {
  if (event.from !== 'uncertain') return undefined;
  const parts = [`by ${event.by} (declared in the verdict)`];
  if (event.identity !== undefined)
    parts.push(`sent by: declared: ${event.identity} (Temporal identity, set by the sender)`);
  if (event.dbUser !== undefined) parts.push(`database user: ${event.dbUser} (authenticated)`);
  return parts.join('; ');
}

/** A word as a POSIX shell reads it back (single-quoted unless plain), for commands printed to paste. */
export function shellWord(word: string): string {
  return /^[\w./:@%+=,-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`;
}

/**
 * The verdicts pending in the store for a worker's check: a pending one decides nothing yet, a
 * refused one says why the key is still uncertain.
 */
function printPending(pending: PendingVerdict[]): string[] {
  const rows = pending.map((v) => [
    `#${v.id}`,
    iso(v.at),
    v.state,
    String(v.fence),
    v.applied
      ? `applied, result ${v.result ? cut(safeResult(v.result.payload)) : 'none'}`
      : 'not applied',
    v.by ?? '-',
    v.state === 'pending' ? "waits for a worker to run the effect's result check" : (v.why ?? '-'),
  ]);
  return [
    "pending verdicts (recorded without a worker; a worker's check decides them):",
    table(['ID', 'AT', 'STATE', 'FENCE', 'VERDICT', 'BY', 'WHY'], rows),
  ];
}

/** A listed value cut to a line's worth: the full one is in `-o json`. */
function cut(text: string): string {
  return text.length > 120
    ? `${text.slice(0, 120)}... (${text.length} characters; -o json has it)`
    : text;
}

function safeResult(payload: Uint8Array): string {
  try {
    return JSON.stringify(decodeJson({ payload }));
  } catch {
    return `${payload.length} bytes (not JSON)`;
  }
}

/** `sideeffect stats`: the backlog first (what pages someone), then who decides and how fast. */
export function printStats(stats: StoreStats): string {
  const { keys, backlog, timeToResolution: ttr } = stats;
  const lines = [
    `uncertain now:     ${backlog.count}${backlog.count > 0 ? `, oldest waiting ${seconds(backlog.oldestAgeMs / 1000)}` : ''}`,
    `keys by state:     ${Object.entries(keys)
      .map(([state, n]) => `${state} ${n}`)
      .join(', ')}`,
    `uncertain so far:  ${stats.uncertainAttempts} attempt(s), ${ttr.count} resolved`,
  ];
  if (ttr.count > 0) {
    lines.push(
      `time to verdict:   median ${seconds(ttr.medianSeconds)}, p95 ${seconds(ttr.p95Seconds)}, max ${seconds(ttr.maxSeconds)}`,
      '',
      table(
        ['BY', 'KIND', 'VERDICT', 'KEYS', 'MEDIAN', 'MAX'],
        stats.resolutions.map((r) => [
          r.by,
          r.kind,
          r.verdict,
          String(r.count),
          seconds(r.medianSeconds),
          seconds(r.maxSeconds),
        ]),
      ),
    );
  }
  return lines.join('\n');
}

function seconds(value: number): string {
  if (value < 120) return `${value.toFixed(1)}s`;
  if (value < 7_200) return `${(value / 60).toFixed(1)}m`;
  if (value < 172_800) return `${(value / 3_600).toFixed(1)}h`;
  return `${(value / 86_400).toFixed(1)}d`;
}

/** Times print as ISO-8601, in text and JSON alike. */
export function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** A key as JSON: its result decoded, or its bytes in base64 when they are not JSON. */
export function jsonRecord(record: KeyRecord) {
  const { result, updatedAt, ...fields } = record;
  const rest = { ...fields, updatedAt: iso(updatedAt) };
  return result ? { ...rest, ...jsonBytes(result, (value) => ({ result: value })) } : rest;
}

/** A pending verdict's result as JSON, or its bytes in base64 when they are not JSON. */
export function jsonResult(result: Result): unknown {
  return jsonBytes(result, (value) => value);
}

function jsonBytes<T>(result: Result, json: (value: unknown) => T): T | { resultBytes: string } {
  try {
    return json(decodeJson(result));
  } catch {
    return { resultBytes: Buffer.from(result.payload).toString('base64') };
  }
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
