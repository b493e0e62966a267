import { readFile } from 'node:fs/promises';
import { type Client, WorkflowUpdateFailedError } from '@temporalio/client';
import { SideEffectError, StoreUnavailableError } from '../core/errors.js';
import type { Store } from '../core/store.js';
import { resolveInputError } from '../protocol/resolve-input.js';
import type { ResolveInput } from '../protocol/wire.js';
import { settleAll } from '../syncx/index.js';
import { resolveKey } from './resolve.js';
import { HELP, UsageError } from './usage.js';

/** One verdict of a batch: a line of `--from-file`, or one selected key of `--resource`. */
export interface BatchVerdict {
  key: string;
  applied: boolean;
  /** What the effect returned; only with `applied: true`. */
  result?: unknown;
  reason: string;
  by: string;
  /**
   * The attempt judged (its fence). Required in a `--from-file` line unless the run says
   * `--any-attempt`; `--resource` takes each key's current one and reports it.
   */
  fence?: number;
}

/** Which keys `sideeffect resolve --resource` decides: uncertain keys on the resource, optionally by age. */
export interface ResourceSelection {
  resource: string;
  /** Only keys uncertain for longer than this. */
  olderThanMs?: number;
  /** Only keys uncertain for less than this. */
  newerThanMs?: number;
}

/** How each verdict of a batch ended, key by key. */
export interface BatchReport {
  dryRun: boolean;
  /** This batch recorded the verdict. With `dryRun`: the keys that are uncertain now and would be decided. */
  decided: string[];
  /** The attempt (fence) each verdict judged, by key: what `--any-attempt` decided, said out loud. */
  fences: Record<string, number>;
  /** Someone decided first (a person in the UI, a probe, an earlier batch): their verdict stands. */
  alreadyDecided: Array<{ key: string; message: string }>;
  /** Refused by the store or the workflow (not uncertain, unknown key, stale fence...). */
  refused: Array<{ key: string; code: string; message: string }>;
  /** Could not be sent (store or Temporal unreachable); safe to run the batch again. */
  failed: Array<{ key: string; message: string }>;
  /**
   * Held in the store until a worker runs the effect's result check on it (no worker answered):
   * not decided yet. `sideeffect show KEY` says what became of it.
   */
  pending: Array<{ key: string; message: string }>;
}

/** Verdicts in flight at once: enough to finish hundreds of keys in seconds, few enough not to flood the worker. */
const CONCURRENCY = 8;
const FILE_FIELDS = new Set(['key', 'applied', 'result', 'reason', 'by', 'fence']);

/**
 * Reads `--from-file`: one JSON verdict a line (blank lines skipped), e.g.
 * made from the downstream's export. Every line is checked before anything is
 * sent, so a typo on line 300 never leaves a batch half applied.
 */
export async function readVerdictFile(
  file: string,
  defaultBy: string,
  anyAttempt = false,
): Promise<BatchVerdict[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read ${file}: ${(error as Error).message}`, HELP.resolve!);
  }
  const verdicts: BatchVerdict[] = [];
  const seen = new Set<string>();
  for (const [index, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '') continue;
    const where = `${file}:${index + 1}`;
    const verdict = parseVerdictLine(line, defaultBy, (message) => {
      throw new UsageError(`${where}: ${message}`, HELP.resolve!);
    });
    if (verdict.fence === undefined && !anyAttempt)
      throw new UsageError(
        `${where}: "fence" is required: the fence of the attempt you checked (\`sideeffect show ${verdict.key}\` prints it), e.g. {"key": ${JSON.stringify(verdict.key)}, ..., "fence": 3}; or run with --any-attempt to decide each key's current attempt`,
        HELP.resolve!,
      );
    if (seen.has(verdict.key))
      throw new UsageError(`${where}: key "${verdict.key}" appears twice`, HELP.resolve!);
    seen.add(verdict.key);
    verdicts.push(verdict);
  }
  if (verdicts.length === 0) throw new UsageError(`${file} holds no verdicts`, HELP.resolve!);
  return verdicts;
}

function parseVerdictLine(
  line: string,
  defaultBy: string,
  fail: (message: string) => never,
): BatchVerdict {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return fail('not valid JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    return fail('expected one JSON object {"key", "applied", "reason", ...}');
  const fields = parsed as Record<string, unknown>;
  const unknown = Object.keys(fields).filter((field) => !FILE_FIELDS.has(field));
  if (unknown.length > 0) fail(`unknown field(s) ${unknown.join(', ')}`);
  const { key, ...resolve } = fields;
  const { applied, result, reason, by, fence } = resolve;
  if (typeof key !== 'string' || key.length === 0) fail('"key" must be a non-empty string');
  // The same judgement as the ReconcileWorkflow's and the store's: no verdict passes here and is refused later.
  const invalid = resolveInputError(resolve);
  if (invalid) fail(invalid);
  if (result !== undefined && !applied) fail('"result" only goes with "applied": true');
  const verdict: BatchVerdict = {
    key: key as string,
    applied: applied as boolean,
    reason: (reason as string).trim(),
    by: (by as string | undefined) ?? defaultBy,
  };
  if (applied) verdict.result = result ?? null;
  if (fence !== undefined) verdict.fence = fence as number;
  return verdict;
}

/**
 * The uncertain keys on `resource` whose age (by the database clock, since
 * they became uncertain) fits the selection, oldest first, each with the fence of its uncertain
 * attempt.
 */
export async function selectUncertain(
  store: Store,
  selection: ResourceSelection,
  databaseNow: () => Promise<number>,
): Promise<Array<{ key: string; fence: number }>> {
  const [records, now] = await Promise.all([
    store.list({ state: 'uncertain', oldest: true }),
    databaseNow(),
  ]);
  const { resource, olderThanMs, newerThanMs } = selection;
  return records
    .filter((record) => record.resource === resource)
    .filter((record) => olderThanMs === undefined || now - record.updatedAt > olderThanMs)
    .filter((record) => newerThanMs === undefined || now - record.updatedAt < newerThanMs)
    .map((record) => ({ key: record.key, fence: record.fence }));
}

/**
 * Sends every verdict, each through the key's ReconcileWorkflow when one runs
 * (so its waiting caller goes on at once), else straight to the store, a few
 * at a time. First resolution wins per key: a verdict someone else beat is
 * reported, never forced. With `dryRun`, only reads which keys are uncertain.
 */
export async function resolveBatch(options: {
  store: Store;
  client: Client | undefined;
  verdicts: BatchVerdict[];
  dryRun: boolean;
  /** Decide in the store at once, unchecked: for keys no Temporal worker serves. */
  storeOnly?: boolean;
}): Promise<BatchReport> {
  const { store, client, verdicts, dryRun, storeOnly } = options;
  const report: BatchReport = {
    dryRun,
    decided: [],
    fences: {},
    alreadyDecided: [],
    refused: [],
    failed: [],
    pending: [],
  };
  const settled = await settleAll(
    verdicts.length,
    async (i) => {
      const verdict = verdicts[i]!;
      if (dryRun) return dryRunOne(store, verdict.key);
      const { key, fence, ...input } = verdict;
      const resolution: ResolveInput = fence === undefined ? input : { ...input, fence };
      // Every held verdict is reported pending at once: a batch does not wait on each judgement.
      const outcome = await resolveKey({
        store,
        client,
        key,
        input: resolution,
        judgeWaitMs: 0,
        ...(storeOnly ? { storeOnly } : {}),
      });
      if (outcome.pending) return { pending: outcome.message };
      return outcome.won ? undefined : { already: outcome.message };
    },
    { concurrency: CONCURRENCY },
  );
  settled.forEach((slot, i) => {
    const { key, fence } = verdicts[i]!;
    if (fence !== undefined) report.fences[key] = fence;
    if (slot.status === 'fulfilled') {
      if (slot.value === undefined) report.decided.push(key);
      else if ('already' in slot.value)
        report.alreadyDecided.push({ key, message: slot.value.already });
      else if ('pending' in slot.value) report.pending.push({ key, message: slot.value.pending });
      else report.refused.push({ key, ...slot.value });
      return;
    }
    const error = slot.reason;
    const message = error instanceof Error ? error.message : String(error);
    const refusal = refusalCode(error);
    if (refusal) report.refused.push({ key, code: refusal, message: refusalMessage(error) });
    else report.failed.push({ key, message });
  });
  return report;
}

/**
 * A dry run reads the key and says what the real run would: uncertain -> decided; decided before
 * (done, or freed by a "not applied" verdict) -> already decided; anything else -> refused.
 */
async function dryRunOne(
  store: Store,
  key: string,
): Promise<undefined | { already: string } | { code: string; message: string }> {
  const record = await store.inspect(key);
  if (record?.state === 'uncertain') return undefined;
  if (record?.state === 'done') return { already: 'already decided: applied' };
  const last = record?.state === 'free' ? (await store.events(key)).at(-1) : undefined;
  if (last?.from === 'uncertain' && last.to === 'free')
    return { already: `already decided by ${last.actor}: not applied (${last.reason})` };
  return {
    code: 'NOT_UNCERTAIN',
    message: record ? `key "${key}" is not uncertain (state: ${record.state})` : `no key "${key}"`,
  };
}

/** The stable code of a verdict refused on its merits (retrying will not help), or undefined for an outage. */
function refusalCode(error: unknown): string | undefined {
  if (error instanceof StoreUnavailableError) return undefined;
  if (error instanceof SideEffectError) return error.code;
  // The workflow's validator or the store behind it said no (e.g. a stale fence).
  if (error instanceof WorkflowUpdateFailedError) return 'REFUSED_BY_WORKFLOW';
  return undefined;
}

function refusalMessage(error: unknown): string {
  if (error instanceof WorkflowUpdateFailedError && error.cause instanceof Error)
    return `${error.message}: ${error.cause.message}`;
  return error instanceof Error ? error.message : String(error);
}

/** The summary an operator reads after a batch: counts first, then every key that needs a look. */
export function printBatch(report: BatchReport, selected: string): string {
  const { decided, alreadyDecided, refused, failed, pending } = report;
  const lines = [
    report.dryRun
      ? `dry run over ${selected}: ${decided.length} would be decided, ${alreadyDecided.length} already decided, ${refused.length} would be refused; nothing was sent`
      : `${selected}: decided ${decided.length}, already decided ${alreadyDecided.length}, refused ${refused.length}, failed ${failed.length}${pending.length > 0 ? `, held pending ${pending.length}` : ''}`,
  ];
  const attempt = (key: string) =>
    report.fences[key] === undefined ? '' : ` (the attempt with fence ${report.fences[key]})`;
  if (report.dryRun && decided.length > 0)
    lines.push('would decide:', ...decided.map((k) => `  ${k}${attempt(k)}`));
  else if (decided.length > 0) lines.push('decided:', ...decided.map((k) => `  ${k}${attempt(k)}`));
  if (alreadyDecided.length > 0)
    lines.push(
      'already decided (their verdict stands):',
      ...alreadyDecided.map((e) => `  ${e.key}: ${e.message}`),
    );
  if (refused.length > 0)
    lines.push('refused:', ...refused.map((e) => `  ${e.key}: ${e.code}: ${e.message}`));
  if (failed.length > 0)
    lines.push('failed (run the batch again):', ...failed.map((e) => `  ${e.key}: ${e.message}`));
  if (pending.length > 0)
    lines.push(
      "held pending (a worker checks each when it next reads the key's store; `sideeffect show KEY` says what became of it):",
      ...pending.map((e) => `  ${e.key}: ${e.message}`),
    );
  return lines.join('\n');
}
