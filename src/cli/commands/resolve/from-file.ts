import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { DataConverter } from '@temporalio/client';
import { resolveInputError } from '../../../protocol/resolve-input.js';
import type { Context } from '../../command.js';
import { UsageError } from '../../usage.js';
import { currentAttempt } from './deliver.js';
import { type KeyVerdict, sendMany } from './many.js';
import { type Common, common, type ResolveArgs } from './options.js';

/** `sideeffect resolve --from-file F`: one verdict a line, each naming its key (and attempt). */
export interface FromFile extends Common {
  form: 'from-file';
  file: string;
  /** `--any-attempt`: a line without `fence` judges the key's current attempt. */
  anyAttempt: boolean;
  dryRun: boolean;
}

/** What a line may not be told from the command line: each line carries its own verdict. */
const PER_LINE = [
  'applied',
  'not-applied',
  'reason',
  'result',
  'fence',
  'older-than',
  'newer-than',
] as const;
const FILE_FIELDS = new Set(['key', 'applied', 'result', 'reason', 'by', 'fence']);

export function parseFromFile(args: ResolveArgs, file: string): FromFile {
  const stray = PER_LINE.find((option) => args.values[option] !== undefined);
  if (stray) args.fail(`--${stray} does not go with --from-file: each line carries its verdict`);
  return {
    form: 'from-file',
    file,
    anyAttempt: args.values['any-attempt'] === true,
    dryRun: args.values['dry-run'] === true,
    ...common(args),
  };
}

export async function runFromFile(
  params: FromFile,
  ctx: Context,
  dataConverter: DataConverter | undefined,
): Promise<number> {
  const { store } = ctx.database();
  let verdicts = await readVerdictFile(params.file, ctx.env.cwd, params.by, params.anyAttempt);
  // Lines without a fence judge each key's current attempt: read now and sent with it, so each
  // verdict still names one attempt (the one the summary prints).
  if (params.anyAttempt)
    verdicts = await Promise.all(
      verdicts.map(async (verdict) => {
        if (verdict.fence !== undefined) return verdict;
        const fence = await currentAttempt(store, verdict.key);
        return fence === undefined ? verdict : { ...verdict, fence };
      }),
    );
  const selected = `${verdicts.length} verdict(s) from ${params.file}`;
  return sendMany(verdicts, selected, params, ctx, dataConverter);
}

/**
 * Reads `--from-file`: one JSON verdict a line (blank lines skipped), e.g. made from the
 * downstream's export. Every line is checked before anything is sent, so a typo on line 300
 * never leaves the run half applied. A relative `file` is read from `cwd`.
 */
async function readVerdictFile(
  file: string,
  cwd: string,
  defaultBy: string,
  anyAttempt: boolean,
): Promise<KeyVerdict[]> {
  let text: string;
  try {
    text = await readFile(path.resolve(cwd, file), 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read ${file}: ${(error as Error).message}`);
  }
  const verdicts: KeyVerdict[] = [];
  const seen = new Set<string>();
  for (const [index, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '') continue;
    const where = `${file}:${index + 1}`;
    const verdict = parseVerdictLine(line, defaultBy, (message) => {
      throw new UsageError(`${where}: ${message}`);
    });
    if (verdict.fence === undefined && !anyAttempt)
      throw new UsageError(
        `${where}: "fence" is required: the fence of the attempt you checked (\`sideeffect show ${verdict.key}\` prints it), e.g. {"key": ${JSON.stringify(verdict.key)}, ..., "fence": 3}; or run with --any-attempt to decide each key's current attempt`,
      );
    if (seen.has(verdict.key)) throw new UsageError(`${where}: key "${verdict.key}" appears twice`);
    seen.add(verdict.key);
    verdicts.push(verdict);
  }
  if (verdicts.length === 0) throw new UsageError(`${file} holds no verdicts`);
  return verdicts;
}

function parseVerdictLine(
  line: string,
  defaultBy: string,
  fail: (message: string) => never,
): KeyVerdict {
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
  const verdict: KeyVerdict = {
    key: key as string,
    applied: applied as boolean,
    reason: (reason as string).trim(),
    by: (by as string | undefined) ?? defaultBy,
  };
  if (applied) verdict.result = result ?? null;
  if (fence !== undefined) verdict.fence = fence as number;
  return verdict;
}
