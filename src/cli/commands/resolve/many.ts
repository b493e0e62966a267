import { type Client, type DataConverter, WorkflowUpdateFailedError } from '@temporalio/client';
import { attemptHistory } from '../../../activities/attempt-history.js';
import { SideEffectError, StoreUnavailableError } from '../../../core/errors.js';
import type { Store } from '../../../core/store.js';
import type { AttemptTimes, ResolveInput } from '../../../protocol/wire.js';
import { settleAll } from '../../../syncx/index.js';
import type { Context } from '../../command.js';
import { connectTemporal, temporalClient, unreachable } from '../../temporal.js';
import { EXIT } from '../../usage.js';
import { resolveKey } from './deliver.js';
import type { Common } from './options.js';

/** One verdict of many: a line of `--from-file`, or one selected key of `--resource`. */
export interface KeyVerdict extends ResolveInput {
  key: string;
  by: string;
  /**
   * The attempt judged (its fence). Required in a `--from-file` line unless the run says
   * `--any-attempt`; `--resource` takes each key's current one and reports it.
   */
  fence?: number;
}

/** How each of many verdicts ended, key by key (`resolve --resource`, `resolve --from-file`). */
interface ManyReport {
  dryRun: boolean;
  /** This run recorded the verdict. With `dryRun`: the keys that are uncertain now and would be decided. */
  decided: string[];
  /** The attempt (fence) each verdict judged, by key: what `--any-attempt` decided, said out loud. */
  fences: Record<string, number>;
  /**
   * With `dryRun`: when each key's judged attempt started and became uncertain, and what the
   * verdict would record, so the person compares them with the downstream before sending.
   */
  attempts: Record<string, AttemptTimes & { verdict: 'applied' | 'not applied' }>;
  /** Someone decided first (a person in the UI, a probe, an earlier run): their verdict stands. */
  alreadyDecided: Array<{ key: string; message: string }>;
  /** Refused by the store or the workflow (not uncertain, unknown key, stale fence...). */
  refused: Array<{ key: string; code: string; message: string }>;
  /** Could not be sent (store or Temporal unreachable); safe to run the command again. */
  failed: Array<{ key: string; message: string }>;
  /**
   * Pending in the store until a worker runs the effect's result check on it (no worker answered):
   * not decided yet. `sideeffect show KEY` says what became of it.
   */
  pending: Array<{ key: string; message: string }>;
}

/** Verdicts in flight at once: enough to finish hundreds of keys in seconds, few enough not to flood the worker. */
const CONCURRENCY = 8;

/**
 * Sends every verdict, each through the key's ReconcileWorkflow when one runs
 * (so its waiting caller goes on at once), else straight to the store, a few
 * at a time. First resolution wins per key: a verdict someone else beat is
 * reported, never forced. With `dryRun`, only reads which keys are uncertain.
 */
async function resolveMany(options: {
  store: Store;
  client: Client | undefined;
  verdicts: KeyVerdict[];
  dryRun: boolean;
  /** Decide in the store at once, unchecked: for keys no Temporal worker serves. */
  storeOnly?: boolean;
}): Promise<ManyReport> {
  const { store, client, verdicts, dryRun, storeOnly } = options;
  const report: ManyReport = {
    dryRun,
    decided: [],
    fences: {},
    attempts: {},
    alreadyDecided: [],
    refused: [],
    failed: [],
    pending: [],
  };
  const settled = await settleAll(
    verdicts.length,
    async (i) => {
      const verdict = verdicts[i]!;
      if (dryRun) {
        const outcome = await dryRunOne(store, verdict.key);
        if (outcome === undefined) report.attempts[verdict.key] = await attemptOf(store, verdict);
        return outcome;
      }
      const { key, fence, ...input } = verdict;
      const resolution: ResolveInput = fence === undefined ? input : { ...input, fence };
      // Every pending verdict is reported pending at once: many verdicts do not wait on each judgement.
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
    return { already: `already decided by ${last.by}: not applied (${last.reason})` };
  return {
    code: 'NOT_UNCERTAIN',
    message: record ? `key "${key}" is not uncertain (state: ${record.state})` : `no key "${key}"`,
  };
}

/** When the verdict's attempt (its fence, else the key's latest) started and ended, and what it records. */
async function attemptOf(
  store: Store,
  verdict: KeyVerdict,
): Promise<ManyReport['attempts'][string]> {
  const fence = verdict.fence ?? (await store.inspect(verdict.key))?.fence ?? 0;
  const { attempt } = attemptHistory(await store.events(verdict.key), fence);
  return { ...attempt, verdict: verdict.applied ? 'applied' : 'not applied' };
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

/** The summary an operator reads after many verdicts: counts first, then every key that needs a look. */
function printMany(report: ManyReport, selected: string): string {
  const { decided, alreadyDecided, refused, failed, pending } = report;
  const lines = [
    report.dryRun
      ? `dry run over ${selected}: ${decided.length} would be decided, ${alreadyDecided.length} already decided, ${refused.length} would be refused; nothing was sent`
      : `${selected}: decided ${decided.length}, already decided ${alreadyDecided.length}, refused ${refused.length}, failed ${failed.length}${pending.length > 0 ? `, pending ${pending.length}` : ''}`,
  ];
  const attempt = (key: string) =>
    report.fences[key] === undefined ? '' : ` (the attempt with fence ${report.fences[key]})`;
  const planned = (key: string) => {
    const { verdict, startedAt, endedAt } = report.attempts[key] ?? {};
    const times = [
      startedAt ? `started ${startedAt}` : undefined,
      endedAt ? `uncertain since ${endedAt}` : undefined,
    ].filter((part) => part !== undefined);
    const fence = report.fences[key];
    return `  ${key}: ${verdict ?? 'decide'} on attempt ${fence ?? '(the latest)'}${times.length > 0 ? ` (${times.join(', ')})` : ''}`;
  };
  if (report.dryRun && decided.length > 0)
    lines.push(
      'would decide (check each attempt against the downstream: its writes carry the fence):',
      ...decided.map(planned),
    );
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
      "pending (a worker checks each when it next reads the key's store; `sideeffect show KEY` says what became of it):",
      ...pending.map((e) => `  ${e.key}: ${e.message}`),
    );
  return lines.join('\n');
}

/**
 * The end both forms share: sends `verdicts` (through Temporal unless `--dry-run` or
 * `--store-only`), prints the summary and picks the exit code: 3 when some verdict could not be
 * sent or is pending (run it again), 1 when some key was decided before or refused.
 */
export async function sendMany(
  verdicts: KeyVerdict[],
  selected: string,
  params: Common & { dryRun: boolean },
  ctx: Context,
  dataConverter: DataConverter | undefined,
): Promise<number> {
  const { dryRun } = params;
  const storeOnly = params.storeOnly === true;
  const temporal = dryRun || storeOnly ? undefined : ctx.temporal();
  const connection = temporal && (await connectTemporal(temporal));
  try {
    const client = connection && temporalClient(connection, temporal!.namespace, dataConverter);
    if (temporal && !client) ctx.err(unreachable(temporal));
    const { store } = ctx.database();
    const report = await resolveMany({ store, client, verdicts, dryRun, storeOnly });
    ctx.print(printMany(report, selected), report);
    if (report.failed.length > 0 || report.pending.length > 0 || (temporal && !client))
      return EXIT.unavailable;
    if (report.alreadyDecided.length > 0 || report.refused.length > 0) return EXIT.refused;
    return EXIT.ok;
  } finally {
    await connection?.close();
  }
}
