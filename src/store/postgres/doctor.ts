import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { databaseNow } from './clock.js';
import { connectionTarget } from './connection.js';
import { type DurabilityReport, durabilityVerdict, readReplication } from './durability.js';
import { INTERNAL_FUNCTIONS, OPERATOR_FUNCTIONS } from './grants.js';
import { migrationStatements, migrationStatus } from './migrate.js';
import { newerSchema } from './newer-schema.js';
import { checkoutFor } from './session.js';
import { quoteSchema } from './sql.js';

/** One thing `sideeffect doctor` looked at, what it found, and what to do about it. */
export interface Finding {
  area: 'replication' | 'synchronous_commit' | 'schema' | 'roles' | 'clock';
  /** `risk`: something to fix (the exit code says so); `unchecked`: the doctor could not tell. */
  status: 'ok' | 'note' | 'risk' | 'unchecked';
  message: string;
  /** The next step; on an `ok`, what it rests on. */
  next?: string;
  /** Every item the message names only the first of (a schema's differences). */
  items?: string[];
}

/** Everything `sideeffect doctor` found about one store. */
export interface DoctorReport {
  host: string;
  schema: string;
  findings: Finding[];
  atRisk: boolean;
  replication: DurabilityReport;
  /** The database clock minus this machine's, and the round trip it was read in. */
  clock: { offsetMs: number; roundTripMs: number };
}

/**
 * What the store behind `pool` needs, in one report: its replication and `synchronous_commit` (can
 * a failover or crash lose an acknowledged commit?), its schema against the one this version's
 * migrations create (a function altered by hand, a column dropped, a security definer lost), the
 * roles holding rights on it, and the database clock against this machine's. Reads only: the
 * reference schema is built in a transaction that is rolled back.
 */
export async function diagnose(
  pool: pg.Pool,
  options: { schema: string; now?: () => number },
): Promise<DoctorReport> {
  const { schema } = options;
  const now = options.now ?? Date.now;
  const replication = durabilityVerdict(await readReplication(pool));
  const findings: Finding[] = [
    ...replicationFindings(replication),
    ...(await schemaFindings(pool, schema)),
  ];
  const before = now();
  const database = await databaseNow(pool);
  const after = now();
  const clock = {
    offsetMs: database - Math.round((before + after) / 2),
    roundTripMs: after - before,
  };
  findings.push(clockFinding(clock));
  return {
    host: connectionTarget(pool),
    schema,
    findings,
    atRisk: findings.some((f) => f.status === 'risk'),
    replication,
    clock,
  };
}

/** The replication verdict and `synchronous_commit`, as findings. */
function replicationFindings(report: DurabilityReport): Finding[] {
  const { mode, risks, notes, facts } = report;
  const findings: Finding[] = [];
  const replicationRisk = risks.find((r) => r.kind === 'asynchronous');
  findings.push(
    replicationRisk
      ? {
          area: 'replication',
          status: 'risk',
          message: `asynchronous: ${replicationRisk.problem}`,
          next: replicationRisk.fix,
        }
      : {
          area: 'replication',
          status: 'ok',
          message: mode === 'single' ? 'single primary, no standby' : mode,
          next: notes.join('; '),
        },
  );
  const commitRisk = risks.find((r) => r.kind !== 'asynchronous');
  findings.push(
    commitRisk
      ? {
          area: 'synchronous_commit',
          status: 'risk',
          message: `${facts.synchronousCommit}: ${commitRisk.problem}`,
          next: commitRisk.fix,
        }
      : {
          area: 'synchronous_commit',
          status: 'ok',
          message: `${facts.synchronousCommit} for the store's role`,
        },
  );
  return findings;
}

/** The schema's migrations, its catalog against this version's, and the roles' rights on it. */
async function schemaFindings(pool: pg.Pool, schema: string): Promise<Finding[]> {
  const status = await migrationStatus(pool, { schema });
  const migrate = `run \`sideeffect migrate --schema ${schema}\``;
  if (status.applied.length === 0)
    return [
      {
        area: 'schema',
        status: 'risk',
        message: `schema ${schema} has no sideeffect tables`,
        next: migrate,
      },
    ];
  if (status.pending.length > 0)
    return [
      {
        area: 'schema',
        status: 'risk',
        message: `schema ${schema} lacks migration(s) ${status.pending.join(', ')}`,
        next: migrate,
      },
    ];
  const newer = newerSchema(status);
  if (newer)
    return [
      'refused' in newer
        ? {
            area: 'schema',
            status: 'risk',
            message: newer.refused.message,
            next: 'upgrade this sideeffect to the version that migrated the schema',
          }
        : {
            area: 'schema',
            status: 'note',
            message: newer.accepted,
            next: 'run the doctor of the version that migrated the schema to compare its catalog',
          },
    ];
  const session = await checkoutFor(pool, 'doctor');
  let broken = false;
  try {
    const findings = await catalogFindings(session.client, schema);
    return [...findings, ...(await roleFindings(session.client, schema))];
  } catch (error) {
    broken = true;
    throw error;
  } finally {
    await session.client.query('rollback').catch(() => {});
    session.release(broken);
  }
}

/**
 * What a schema holds that a migration made, one line each, with the schema's own name taken out
 * of a function's pinned search_path. Read with `search_path` set to the schema, so types
 * and functions print unqualified.
 */
const CATALOG = `select item from (
  select 'column ' || c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
         || case when a.attnotnull then ' not null' else '' end
         || coalesce(' default ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '') as item
    from pg_catalog.pg_attribute a
    join pg_catalog.pg_class c on c.oid operator(pg_catalog.=) a.attrelid
    left join pg_catalog.pg_attrdef d on d.adrelid operator(pg_catalog.=) a.attrelid and d.adnum operator(pg_catalog.=) a.attnum
   where c.relnamespace operator(pg_catalog.=) $1::oid and c.relkind in ('r', 'p', 'v')
     and a.attnum operator(pg_catalog.>) 0 and not a.attisdropped
  union all
  select 'function ' || p.oid::pg_catalog.regprocedure::text || ' returns ' || pg_catalog.pg_get_function_result(p.oid)
         || case when p.prosecdef then ' security definer' else '' end
         || coalesce(' set ' || pg_catalog.replace(pg_catalog.array_to_string(p.proconfig, ', '),
              'search_path=' || pg_catalog.quote_ident(pg_catalog.current_schema()), 'search_path=<schema>'), '')
         || ' body md5 ' || pg_catalog.md5(p.prosrc)
    from pg_catalog.pg_proc p
   where p.pronamespace operator(pg_catalog.=) $1::oid
  union all
  select 'trigger ' || c.relname || '.' || t.tgname || ' ' || t.tgfoid::pg_catalog.regprocedure::text
    from pg_catalog.pg_trigger t join pg_catalog.pg_class c on c.oid operator(pg_catalog.=) t.tgrelid
   where c.relnamespace operator(pg_catalog.=) $1::oid and not t.tgisinternal
  union all
  select 'execute granted to PUBLIC on ' || p.oid::pg_catalog.regprocedure::text
    from pg_catalog.pg_proc p, pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
   where p.pronamespace operator(pg_catalog.=) $1::oid and a.grantee operator(pg_catalog.=) 0
  union all
  select 'index ' || pg_catalog.replace(pg_catalog.pg_get_indexdef(i.indexrelid),
           ' ON ' || pg_catalog.quote_ident(pg_catalog.current_schema()) || '.', ' ON ')
    from pg_catalog.pg_index i join pg_catalog.pg_class c on c.oid operator(pg_catalog.=) i.indexrelid
   where c.relnamespace operator(pg_catalog.=) $1::oid
) catalog`;

const NAMESPACE =
  'select oid from pg_catalog.pg_namespace where nspname operator(pg_catalog.=) $1::text';

async function catalogOf(client: pg.ClientBase, schema: string): Promise<Set<string>> {
  await client.query(`set local search_path to ${quoteSchema(schema)}, pg_temp`);
  const { rows: ns } = await client.query<{ oid: number }>(NAMESPACE, [schema]);
  const { rows } = await client.query<{ item: string }>(CATALOG, [ns[0]!.oid]);
  return new Set(rows.map((row) => row.item));
}

/**
 * The live schema's catalog against this version's, built by its migrations in a scratch schema
 * in the same transaction (rolled back by the caller): the drift check. A role that may not
 * create a schema cannot build it, and the finding says so.
 */
async function catalogFindings(client: pg.ClientBase, schema: string): Promise<Finding[]> {
  await client.query('begin isolation level read committed');
  const live = await catalogOf(client, schema);
  const scratch = `sideeffect_doctor_${randomBytes(6).toString('hex')}`;
  await client.query('savepoint reference');
  try {
    // The script's own BEGIN only warns inside this transaction.
    await client.query(migrationStatements(scratch).join('\n'));
  } catch (error) {
    await client.query('rollback to savepoint reference');
    return [
      {
        area: 'schema',
        status: 'unchecked',
        message: `could not build this version's schema to compare with (${error instanceof Error ? error.message : String(error)})`,
        next: "run the doctor as the schema's owner, with CREATE on the database (nothing is kept: the reference schema is rolled back)",
      },
    ];
  }
  const reference = await catalogOf(client, scratch);
  await client.query('rollback to savepoint reference');
  await client.query(`set local search_path to ${quoteSchema(schema)}, pg_temp`);
  const missing = [...reference].filter((item) => !live.has(item));
  const extra = [...live].filter((item) => !reference.has(item));
  if (missing.length === 0 && extra.length === 0)
    return [
      {
        area: 'schema',
        status: 'ok',
        message: `schema ${schema} matches this version's migrations (${reference.size} columns, functions, triggers and indexes)`,
      },
    ];
  const items = [...missing.map((item) => `lacks ${item}`), ...extra.map((item) => `has ${item}`)];
  return [
    {
      area: 'schema',
      status: 'risk',
      items,
      message: `schema ${schema} differs from what this version's migrations create: ${listed(items)}`,
      next: 'the schema was changed by hand (a changed function changes what the store promises): put back what this version created (`sideeffect migrate --print-sql` holds every definition) and revoke what was granted or added',
    },
  ];
}

/** At most {@link LISTED} items, then how many more: a screen, not a dump. */
function listed(items: string[]): string {
  const more = items.length - LISTED;
  return `${items.slice(0, LISTED).join('; ')}${more > 0 ? `; and ${more} more (-o json lists all)` : ''}`;
}

const LISTED = 10;

/** Rights on the schema's tables and functions held by roles other than each object's owner. */
const GRANTS = `select coalesce(r.rolname, 'PUBLIC') as grantee, x.kind, x.object, x.privilege
  from (select 'table'::text as kind, c.relname::text as object, a.grantee, a.privilege_type as privilege, c.relowner as owner
          from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         where c.relnamespace operator(pg_catalog.=) $1::oid and c.relkind in ('r', 'p')
        union all
        select 'function', p.oid::pg_catalog.regprocedure::text, a.grantee, a.privilege_type, p.proowner
          from pg_catalog.pg_proc p,
               pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
         where p.pronamespace operator(pg_catalog.=) $1::oid) x
  left join pg_catalog.pg_roles r on r.oid operator(pg_catalog.=) x.grantee
 where x.grantee operator(pg_catalog.<>) x.owner`;

/** Every function of the schema, and which of them are internal or an operator's. */
const FUNCTIONS = `select p.oid::pg_catalog.regprocedure::text as name,
       p.oid operator(pg_catalog.=) any (select pg_catalog.to_regprocedure(s)::oid from pg_catalog.unnest($2::text[]) s) as internal,
       p.oid operator(pg_catalog.=) any (select pg_catalog.to_regprocedure(s)::oid from pg_catalog.unnest($3::text[]) s) as operator
  from pg_catalog.pg_proc p where p.pronamespace operator(pg_catalog.=) $1::oid`;

const WRITES = new Set(['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']);

/**
 * Each role's rights against what its kind needs (docs/database-roles.md): nobody but the owner
 * writes a table or runs an internal function (they move keys without the checks; what PUBLIC
 * may run is compared with this version's catalog), and a worker's role (one that may run a function no operator needs) may run every
 * function a worker calls: one it lacks fails that call in production.
 */
async function roleFindings(client: pg.ClientBase, schema: string): Promise<Finding[]> {
  const { rows: ns } = await client.query<{ oid: number }>(NAMESPACE, [schema]);
  const oid = ns[0]!.oid;
  const { rows: who } = await client.query<{ who: string; superuser: boolean; owner: string }>(
    `select current_user as who, r.rolsuper as superuser, pg_catalog.pg_get_userbyid(n.nspowner) as owner
       from pg_catalog.pg_roles r, pg_catalog.pg_namespace n
      where r.rolname operator(pg_catalog.=) current_user and n.oid operator(pg_catalog.=) $1::oid`,
    [oid],
  );
  const { rows: grants } = await client.query<{
    grantee: string;
    kind: 'table' | 'function';
    object: string;
    privilege: string;
  }>(GRANTS, [oid]);
  const { rows: functions } = await client.query<{
    name: string;
    internal: boolean;
    operator: boolean;
  }>(FUNCTIONS, [oid, INTERNAL_FUNCTIONS, OPERATOR_FUNCTIONS]);
  const internal = new Set(functions.filter((f) => f.internal).map((f) => f.name));
  const operator = new Set(functions.filter((f) => f.operator).map((f) => f.name));
  const workerCalls = functions.map((f) => f.name).filter((name) => !internal.has(name));
  const findings: Finding[] = [];
  const byRole = new Map<string, typeof grants>();
  for (const grant of grants)
    byRole.set(grant.grantee, [...(byRole.get(grant.grantee) ?? []), grant]);
  const me = who[0]!;
  const roles: string[] = [];
  for (const [role, held] of byRole) {
    const grantsFix = `as the schema's owner, revoke it and apply \`sideeffect migrate --print-grants ${role} --kind runtime|operator|readonly\` (docs/database-roles.md)`;
    const writes = held.filter((g) => g.kind === 'table' && WRITES.has(g.privilege));
    if (writes.length > 0)
      findings.push({
        area: 'roles',
        status: 'risk',
        message: `${role} may write the store's tables directly (${writes.map((g) => `${g.privilege} on ${g.object}`).join(', ')}), past the checks of its functions`,
        next: grantsFix,
      });
    const executes = held.filter((g) => g.kind === 'function' && g.privilege === 'EXECUTE');
    // What PUBLIC may run is part of the schema's catalog, compared with this version's above.
    const callsInternal = executes.filter((g) => internal.has(g.object));
    if (role !== 'PUBLIC' && callsInternal.length > 0)
      findings.push({
        area: 'roles',
        status: 'risk',
        message: `${role} may run the store's internal function(s) ${callsInternal.map((g) => g.object).join(', ')}, which move keys without checks`,
        next: grantsFix,
      });
    const runs = new Set(executes.map((g) => g.object));
    const worker = [...runs].some((name) => !operator.has(name) && !internal.has(name));
    const lacks = worker ? workerCalls.filter((name) => !runs.has(name)) : [];
    if (role !== 'PUBLIC' && lacks.length > 0)
      findings.push({
        area: 'roles',
        status: 'risk',
        message: `${role} is a worker's role (it may run functions only workers call) but may not run ${lacks.join(', ')}: those calls fail`,
        next: `as the schema's owner, apply \`sideeffect migrate --print-grants ${role} --kind runtime\``,
      });
    if (role !== 'PUBLIC')
      roles.push(`${role} (${worker ? 'runtime' : runs.size > 0 ? 'operator' : 'readonly'})`);
  }
  findings.unshift({
    area: 'roles',
    status: 'ok',
    message: `connected as ${me.who}${me.superuser ? ' (superuser)' : ''}; schema owner ${me.owner}; others with rights: ${roles.join(', ') || 'none'}`,
    ...(me.superuser
      ? { next: 'run workers and the CLI under roles of their own (docs/database-roles.md)' }
      : {}),
  });
  return findings;
}

/** The store stamps every lease with the database clock, so an offset misleads people, not leases. */
const CLOCK_NOTE_MS = 5_000;

function clockFinding(clock: { offsetMs: number; roundTripMs: number }): Finding {
  const offset = `${clock.offsetMs >= 0 ? '+' : ''}${clock.offsetMs} ms (database minus this machine, read in a ${clock.roundTripMs} ms round trip)`;
  return Math.abs(clock.offsetMs) - clock.roundTripMs > CLOCK_NOTE_MS
    ? {
        area: 'clock',
        status: 'note',
        message: `clock offset ${offset}`,
        next: "leases and ages are judged by the database clock, so nothing breaks; but logs of this machine and the store's times disagree: run NTP (chrony) on both",
      }
    : { area: 'clock', status: 'ok', message: `clock offset ${offset}` };
}
