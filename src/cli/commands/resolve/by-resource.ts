import type { DataConverter } from '@temporalio/client';
import { databaseNow } from '../../../store/postgres/admin.js';
import type { Context, Database } from '../../command.js';
import { sendMany } from './many.js';
import { applied, type Common, common, type ResolveArgs, reason } from './options.js';

/** Which keys `sideeffect resolve --resource` decides: uncertain keys on the resource, optionally by age. */
interface ResourceSelection {
  resource: string;
  /** Only keys uncertain for longer than this. */
  olderThanMs?: number;
  /** Only keys uncertain for less than this. */
  newerThanMs?: number;
}

/** `sideeffect resolve --resource R`: one verdict for every key uncertain on R, each at its current attempt. */
export interface ByResource extends Common {
  form: 'by-resource';
  selection: ResourceSelection;
  applied: boolean;
  reason: string;
  dryRun: boolean;
}

export function parseByResource(args: ResolveArgs, resource: string): ByResource {
  const { values } = args;
  const isApplied = applied(args);
  if (values.fence !== undefined)
    args.fail(
      "--fence does not go with --resource: each key has its own attempt; --any-attempt decides each key's current attempt and prints its fence, --from-file takes a fence per key",
    );
  if (values.result !== undefined)
    args.fail(
      '--result does not go with --resource: every key would get the same result; put per-key results in --from-file',
    );
  const why = reason(args);
  if (values['any-attempt'] !== true)
    args.fail(
      '--resource needs --any-attempt: it decides the attempt each key has uncertain when it is sent, without anyone having checked that attempt, and prints each key\'s fence; to name the attempts you checked, put one line per key with its "fence" in --from-file',
    );
  const selection: ResourceSelection = { resource };
  if (values['older-than'] !== undefined) selection.olderThanMs = values['older-than'];
  if (values['newer-than'] !== undefined) selection.newerThanMs = values['newer-than'];
  return {
    form: 'by-resource',
    selection,
    applied: isApplied,
    reason: why,
    dryRun: values['dry-run'] === true,
    ...common(args),
  };
}

export async function runByResource(
  params: ByResource,
  ctx: Context,
  dataConverter: DataConverter | undefined,
): Promise<number> {
  const uncertainNow = await selectUncertain(ctx.database(), params.selection);
  const { applied, reason, by } = params;
  const verdicts = uncertainNow.map(({ key, fence }) =>
    applied
      ? { key, applied, result: null, reason, by, fence }
      : { key, applied, reason, by, fence },
  );
  const selected = `${verdicts.length} uncertain key(s) on ${params.selection.resource}`;
  return sendMany(verdicts, selected, params, ctx, dataConverter);
}

/**
 * The uncertain keys on `resource` whose age (by the database clock, since they became
 * uncertain) fits the selection, oldest first, each with the fence of its uncertain attempt.
 */
async function selectUncertain(
  { store, pool }: Database,
  selection: ResourceSelection,
): Promise<Array<{ key: string; fence: number }>> {
  const [records, now] = await Promise.all([
    store.list({ state: 'uncertain', oldest: true }),
    databaseNow(pool),
  ]);
  const { resource, olderThanMs, newerThanMs } = selection;
  return records
    .filter((record) => record.resource === resource)
    .filter((record) => olderThanMs === undefined || now - record.updatedAt > olderThanMs)
    .filter((record) => newerThanMs === undefined || now - record.updatedAt < newerThanMs)
    .map((record) => ({ key: record.key, fence: record.fence }));
}
