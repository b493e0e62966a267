import { InvalidActionError } from '../../core/errors.js';
import { DEFAULT_SCHEMA, quoteSchema } from './sql.js';

/**
 * What a database role does with the store, each given exactly what it needs (docs/database-roles.md):
 * - `runtime`: workers (every Store and PgFencedSink operation, the sweeper, `purge`, and a
 *   `migrate()` with nothing to apply); rows and functions, no DDL.
 * - `operator`: the CLI's list, show, resolve and stats; reads keys, events and held verdicts,
 *   and records verdicts only through the store's functions (`hold_verdict()` for one no worker
 *   has checked), never by writing a table.
 * - `readonly`: dashboards; reads every table, writes nothing, cannot resolve.
 */
export type RoleKind = 'runtime' | 'operator' | 'readonly';

const KINDS: readonly RoleKind[] = ['runtime', 'operator', 'readonly'];

/** The verdict function, by its signature (resolve_uncertain runs with its owner's rights). */
const RESOLVE = 'resolve_uncertain(text, boolean, bytea, text, text, bigint)';
/** The same with the delivering identity (0009); the store calls this one. */
const RESOLVE_WITH_IDENTITY = 'resolve_uncertain(text, boolean, bytea, text, text, bigint, text)';
/** Holds a verdict for a worker's check (0010): what the CLI records when no worker answers. */
const HOLD = 'hold_verdict(text, boolean, bytea, text, text, bigint, text)';

/**
 * The GRANT statements that give an existing role what its kind needs on a migrated schema, as SQL
 * a DBA reads and applies (`sideeffect migrate --print-grants ROLE --kind KIND`). Run it as the
 * schema's owner after `migrate()`, and again after an upgrade that adds tables or functions.
 * A role given more (DDL, direct writes to the audit trail) is how a compromised dashboard or CLI
 * host rewrites what was decided.
 *
 * @example
 * ```ts
 * import { grantsScript } from 'sideeffect/postgres';
 * console.log(grantsScript({ schema: 'sideeffect', role: 'app_worker', kind: 'runtime' }));
 * ```
 */
export function grantsScript(options: { schema?: string; role: string; kind: RoleKind }): string {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const s = quoteSchema(schemaName);
  const { role, kind } = options;
  if (typeof role !== 'string' || role.length === 0 || role.includes('\0')) {
    throw new InvalidActionError('role', 'must be a non-empty role name');
  }
  if (!KINDS.includes(kind)) {
    throw new InvalidActionError('kind', `must be one of ${KINDS.join(', ')}, got ${String(kind)}`);
  }
  const r = `"${role.replaceAll('"', '""')}"`;
  const lines = [
    `-- sideeffect ${kind} role ${role} on schema ${schemaName}`,
    `grant usage on schema ${s} to ${r};`,
  ];
  switch (kind) {
    case 'runtime':
      lines.push(
        `grant select, insert, update, delete on table ${s}.keys to ${r};`,
        `grant select, insert, delete on table ${s}.events to ${r};`,
        `grant select, insert, update on table ${s}.resources, ${s}.sink_fences, ${s}.reconcile_starts to ${r};`,
        `grant select on table ${s}.migrations, ${s}.migration_history, ${s}.pending_verdicts to ${r};`,
        `grant execute on all functions in schema ${s} to ${r};`,
      );
      break;
    case 'operator':
      lines.push(
        `grant select on table ${s}.keys, ${s}.events, ${s}.pending_verdicts to ${r};`,
        `grant execute on function ${s}.${RESOLVE}, ${s}.${RESOLVE_WITH_IDENTITY}, ${s}.${HOLD}, ${s}.epoch_ms(timestamptz), ${s}.store_now() to ${r};`,
      );
      break;
    case 'readonly':
      lines.push(
        `grant select on all tables in schema ${s} to ${r};`,
        `grant execute on function ${s}.epoch_ms(timestamptz), ${s}.store_now() to ${r};`,
      );
      break;
  }
  return `${lines.join('\n')}\n`;
}
