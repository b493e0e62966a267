import type { RoleKind } from '../../store/postgres/admin.js';
import { LEASES, newerSchema } from '../../store/postgres/admin.js';
import {
  migrate as applyMigrations,
  grantsScript,
  type MigrateOptions,
  migrationScript,
  migrationStatus,
} from '../../store/postgres/index.js';
import { type Context, defineCommand } from '../command.js';
import { nonEmpty, oneOf } from '../option-checks.js';
import { printer } from '../output.js';
import { EXIT } from '../usage.js';

const KINDS: readonly RoleKind[] = ['runtime', 'operator', 'readonly'];
const KIND_PROBLEM = '--print-grants needs --kind runtime, operator or readonly';
// Outside the definition: a generic call inside it is typed before `parse` and reads as string.
const kindOf = oneOf(KINDS, KIND_PROBLEM);
/** The options that pick what migrate does; at most one. */
const MODES = ['print-sql', 'print-grants', 'status', 'dry-run'] as const;
type Lease = NonNullable<MigrateOptions['transactionalLease']>;
const leaseOf = oneOf(LEASES, '--transactional-lease must be key-row or resource-row');

/** What `sideeffect migrate` was asked to do. */
type Migrate =
  | { mode: 'apply'; lease: Lease | undefined }
  | { mode: 'status' | 'dry-run' | 'print-sql' }
  | { mode: 'print-grants'; role: string; kind: RoleKind };

/** `sideeffect migrate`: the store's tables, created, upgraded, inspected or printed as SQL. */
export const migrate = defineCommand({
  name: 'migrate',
  summary:
    'create or upgrade the tables (safe to run from many workers); --status lists applied and pending migrations, --dry-run what would be applied, --print-sql the SQL for your own migration tool',
  usage: [
    'sideeffect migrate [--status | --dry-run | --print-sql | --print-grants ROLE --kind KIND] [-o text|json|jsonl]',
    'sideeffect migrate --transactional-lease key-row',
  ],
  about: `Creates or upgrades the sideeffect tables in the schema (--schema, SIDEEFFECT_SCHEMA).
Idempotent; several workers may run it at once.`,
  options: {
    status: {
      type: 'boolean',
      description: 'list the applied migrations (with when) and the pending ones; changes nothing',
    },
    'dry-run': { type: 'boolean', description: 'print what migrate would apply; changes nothing' },
    'print-sql': {
      type: 'boolean',
      description:
        'print, without connecting, one SQL script that creates the schema from scratch and records its migrations, for a team whose own tool owns the database (a later `sideeffect migrate` then finds nothing to do)',
    },
    'print-grants': {
      type: 'string',
      arg: 'ROLE',
      description:
        "print, without connecting, the GRANT statements that give an existing role what its --kind needs (docs/database-roles.md); run them as the schema's owner",
      parse: nonEmpty('--print-grants needs a role name'),
    },
    kind: {
      type: 'string',
      arg: 'runtime|operator|readonly',
      description: 'with --print-grants: what the role does (a worker, a person, a dashboard)',
      parse: kindOf,
    },
    'transactional-lease': {
      type: 'string',
      arg: 'key-row',
      description:
        'after migrating, switch what transactional effects hold until their COMMIT to the key row and an advisory lock (less database work per effect; fences no longer consecutive). Safe with workers of any version running; there is no way back. --status shows the current one',
      parse: leaseOf,
    },
  },
  parse(args): Migrate {
    const { values } = args;
    const modes = MODES.filter((mode) => values[mode] !== undefined);
    if (modes.length > 1) args.fail(`give one of --${modes.join(', --')}, not several`);
    const lease = values['transactional-lease'];
    if (lease !== undefined && modes.length > 0)
      args.fail(`--transactional-lease changes the schema: not with --${modes[0]}`);
    const role = values['print-grants'];
    if (role !== undefined || values.kind !== undefined) {
      if (role === undefined) return args.fail('--print-grants needs a role name');
      return { mode: 'print-grants', role, kind: values.kind ?? args.fail(KIND_PROBLEM) };
    }
    if (values['print-sql']) return { mode: 'print-sql' };
    if (values.status) return { mode: 'status' };
    return values['dry-run'] ? { mode: 'dry-run' } : { mode: 'apply', lease };
  },
  async run(params, ctx) {
    const { schema } = ctx;
    // SQL text, printed as written: no reason or connection string is in it.
    if (params.mode === 'print-grants') {
      ctx.verbatim(grantsScript({ schema, role: params.role, kind: params.kind }));
      return EXIT.ok;
    }
    if (params.mode === 'print-sql') {
      const sql = migrationScript({ schema });
      printer(ctx.options.output, ctx.verbatim)(sql, { schema, sql });
      return EXIT.ok;
    }
    if (params.mode !== 'apply') return status(ctx, params.mode === 'dry-run');
    const { lease } = params;
    const applied = await applyMigrations(ctx.database().pool, {
      schema,
      ...(lease === undefined ? {} : { transactionalLease: lease }),
    });
    ctx.print(
      [
        applied.length
          ? `applied ${applied.join(', ')} to schema ${schema}`
          : `schema ${schema} is up to date`,
        ...(lease === undefined ? [] : [`transactional effects take the ${lease} lease`]),
      ].join('\n'),
      { schema, applied, ...(lease === undefined ? {} : { transactionalLease: lease }) },
    );
    return EXIT.ok;
  },
});

/** `--status` (what was applied, what is pending) or `--dry-run` (what migrate would apply). */
async function status(ctx: Context, dryRun: boolean): Promise<number> {
  const { schema } = ctx;
  const found = await migrationStatus(ctx.database().pool, { schema });
  const { applied, pending, unknown, transactionalLease } = found;
  // What migrate() itself would refuse, in its words.
  const newer = newerSchema(found);
  if (dryRun && newer && 'refused' in newer)
    return ctx.fail(newer.refused.code, newer.refused.message, EXIT.refused, { schema, unknown });
  if (dryRun) {
    ctx.print(
      pending.length
        ? `would apply ${pending.join(', ')} to schema ${schema} (dry run: nothing changed)`
        : `schema ${schema} is up to date (dry run: nothing changed)`,
      { schema, dryRun: true, pending },
    );
    return EXIT.ok;
  }
  ctx.print(
    [
      `schema ${schema}: ${applied.length} applied, ${pending.length} pending`,
      ...applied.map((m) => `  applied  ${m.appliedAt}  ${m.name}`),
      ...pending.map((name) => `  pending  ${name}`),
      ...(newer ? [`  ${'refused' in newer ? newer.refused.message : newer.accepted}`] : []),
      ...(transactionalLease ? [`transactional lease: ${transactionalLease}`] : []),
      ...(pending.length ? ['run `sideeffect migrate` to apply the pending ones'] : []),
    ].join('\n'),
    { schema, applied, pending, unknown, transactionalLease },
  );
  return EXIT.ok;
}
