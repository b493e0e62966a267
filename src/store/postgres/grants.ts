import { InvalidActionError } from '../../core/errors.js';
import { commentName, defaultSchema, quoteSchema } from './sql.js';

/**
 * What a database role does with the store, each given exactly what it needs (docs/database-roles.md):
 * - `runtime`: workers (every Store and PgFencedSink operation, the sweeper, `purge` above the
 *   floor, and a `migrate()` with nothing to apply); reads the tables and calls the store's
 *   functions, which write with their owner's rights; writes no table itself, no DDL.
 * - `operator`: the CLI's list, show, resolve, withdraw, stats, breakers and `migrate --status`;
 *   reads keys, events, pending verdicts, breakers and the migration records, and records or
 *   withdraws verdicts and opens or closes breakers only through the store's functions
 *   (`hold_verdict()` for a verdict no worker has checked), never by writing a table.
 * - `readonly`: dashboards; reads every table, writes nothing, cannot resolve.
 */
export type RoleKind = 'runtime' | 'operator' | 'readonly';

const KINDS: readonly RoleKind[] = ['runtime', 'operator', 'readonly'];

/** The verdict function, by its signature (resolve_uncertain runs with its owner's rights). */
const RESOLVE = 'resolve_uncertain(text, boolean, bytea, text, text, bigint)';
/** The same with the delivering identity (0009); the store calls this one. */
const RESOLVE_WITH_IDENTITY = 'resolve_uncertain(text, boolean, bytea, text, text, bigint, text)';
/** 0.1.0's verdict call, answered in its shape again since 0013. */
const RESOLVE_0_1_0 = 'resolve_uncertain(text, boolean, bytea, text, text)';
/**
 * The store's own helpers, which move keys without the checks of the functions that call them:
 * no role but the owner runs them (0013's secure_store_functions() keeps them so).
 */
export const INTERNAL_FUNCTIONS: readonly string[] = [
  'conclude(text, text, timestamptz)',
  'move_key(text, bigint, text, bytea, text, text, timestamptz)',
  'tx_complete(text, text, bytea, bigint, text, bytea)',
  'secure_store_functions()',
  'breaker_move(text, text, text, text, text, timestamptz)',
];
/** Every table of the store: what an older version of this script gave a runtime role writes on. */
const TABLES = [
  'keys',
  'events',
  'resources',
  'sink_fences',
  'reconcile_starts',
  'pending_verdicts',
  'breakers',
  'breaker_outcomes',
  'breaker_events',
];
/** Holds a verdict for a worker's check (0010): what the CLI records when no worker answers. */
const HOLD = 'hold_verdict(text, boolean, bytea, text, text, bigint, text)';
/** What people do with breakers (0021): list them, read their history, open or close one. */
const BREAKERS = [
  'breaker_set(text, boolean, text, text, text)',
  'breaker_list()',
  'breaker_history(text)',
  'breaker_answer(text)',
];
const WITHDRAW = 'withdraw_verdict(bigint, text, text, text, text)';
/** Every function an operator may call: a role that may call any other (not internal) is a worker's. */
export const OPERATOR_FUNCTIONS: readonly string[] = [
  RESOLVE,
  RESOLVE_WITH_IDENTITY,
  RESOLVE_0_1_0,
  HOLD,
  WITHDRAW,
  ...BREAKERS,
  'epoch_ms(timestamptz)',
  'store_now()',
];

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
  const schemaName = options.schema ?? defaultSchema();
  const s = quoteSchema(schemaName);
  const { role, kind } = options;
  if (typeof role !== 'string' || role.length === 0 || role.includes('\0')) {
    throw new InvalidActionError('role', 'must be a non-empty role name');
  }
  if (!KINDS.includes(kind)) {
    throw new InvalidActionError('kind', `must be one of ${KINDS.join(', ')}, got ${String(kind)}`);
  }
  const r = `"${role.replaceAll('"', '""')}"`;
  const tables = TABLES.map((table) => `${s}.${table}`).join(', ');
  const lines = [
    `-- sideeffect ${kind} role ${commentName(role)} on schema ${commentName(schemaName)}`,
    `grant usage on schema ${s} to ${r};`,
  ];
  switch (kind) {
    case 'runtime':
      lines.push(
        // What earlier versions of this script granted: the store's functions write now.
        `revoke insert, update, delete, truncate on table ${tables} from ${r};`,
        `grant select on table ${tables}, ${s}.migrations, ${s}.migration_history to ${r};`,
        `grant execute on all functions in schema ${s} to ${r};`,
        `revoke execute on function ${INTERNAL_FUNCTIONS.map((fn) => `${s}.${fn}`).join(', ')} from ${r};`,
      );
      break;
    case 'operator':
      lines.push(
        `grant select on table ${s}.keys, ${s}.events, ${s}.pending_verdicts, ${s}.breakers, ${s}.breaker_events, ${s}.settings, ${s}.migrations, ${s}.migration_history to ${r};`,
        `grant execute on function ${OPERATOR_FUNCTIONS.map((fn) => `${s}.${fn}`).join(', ')} to ${r};`,
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
