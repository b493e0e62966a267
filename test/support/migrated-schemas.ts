/**
 * Migrated schemas handed from one test of a file to the next. Migrating a schema runs every
 * migration (seconds, more with each release; and every schema made and dropped leaves dead rows
 * in the shared catalogs); emptying one takes a few milliseconds. So a test that asks for a migrated schema
 * gets one its file's earlier test gave back, emptied, or a new one if none is idle; the file's
 * end drops them (test/support/setup-postgres-file.ts; test/store/postgres-harness-reuse.test.ts
 * checks the hand-over). `migrate()` itself is tested on schemas of their own
 * (postgres-migrate*.test.ts), never through this.
 *
 * A schema goes back only as clean as a new one, else it is dropped and the next test migrates a
 * new one:
 * - Its rows: every table empty after the set-up is emptied (triggers and foreign keys off for
 *   it), and every sequence restarts, so fences, event and verdict ids start again at 1; the
 *   rows the set-up wrote (the migration records) must be as they were.
 * - Its catalog (tables, columns, functions, constraints, triggers, privileges) must be what the
 *   set-up left: a test that altered, dropped, replaced or granted something gets it dropped.
 *   Privileges given to a role that was dropped since compare as never given.
 * - Sessions: each lease has a pool of its own, ended when the schema is given back, so no
 *   session lock, prepared statement or setting outlives it; if a session still holds the
 *   schema's sweep leader lock (a store through a pooler not yet closed), it is dropped.
 */
import pg from 'pg';
import { sweepLockKey } from '../../src/store/postgres/sweep-leader.js';
import { databaseUrl, type FreshSchema, freshSchema } from './postgres.js';

export interface MigratedSchemaSpec {
  /** Names the schema (`freshSchema`'s prefix). */
  prefix: string;
  /** The database; default the test database. */
  url?: string;
  /** Schemas made by the same `variant` are interchangeable. */
  variant: string;
  /** Makes a new schema what the variant needs: migrate() and any test objects. */
  prepare(db: FreshSchema): Promise<void>;
  /**
   * Puts back rows of tables the set-up wrote that tests may change (e.g. a test clock), run with
   * the schema as search_path before the checks.
   */
  resetSql?: string;
  /** Tables `resetSql` puts back: their rows are not compared. */
  resetTables?: string[];
}

interface Idle {
  schema: string;
  url: string;
  config: pg.PoolConfig;
  /** Tables empty after the set-up: emptied on each return. */
  emptied: string[];
  /** Tables the set-up wrote rows to (the migration records): compared, never emptied. */
  seeded: string[];
  /** The catalog and the set-up's rows, as the set-up left them. */
  fingerprint: string;
}

const idle = new Map<string, Idle[]>();
/** Every schema this file made and has not dropped (leased or idle). */
const made = new Set<Idle>();
const admins = new Map<string, pg.Pool>();

function admin(url: string): pg.Pool {
  let pool = admins.get(url);
  if (!pool) {
    // One connection, closed when idle: a shared server's connection slots are few.
    pool = new pg.Pool({
      connectionString: url,
      max: 1,
      idleTimeoutMillis: 1_000,
      allowExitOnIdle: true,
    });
    pool.on('error', () => {});
    admins.set(url, pool);
  }
  return pool;
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * The schema's catalog entries and the set-up's rows, as one hash. Privileges are compared with
 * NULL (never granted) and the owner's default as equal, so a grant to a role later dropped
 * (`drop owned by`) leaves no difference.
 */
async function fingerprint(client: pg.ClientBase, schema: string, rowTables: string[]) {
  const rows = rowTables.map(
    (table) =>
      `union all select pg_catalog.concat_ws(' ', 'rows', ${pg.escapeLiteral(table)}, (select pg_catalog.md5(pg_catalog.string_agg(t::text, ',' order by t::text)) from ${quoteIdent(schema)}.${quoteIdent(table)} t))`,
  );
  const { rows: result } = await client.query<{ fingerprint: string }>(
    `with ns as (select oid, nspowner, nspacl from pg_catalog.pg_namespace where nspname = $1)
     select pg_catalog.md5(pg_catalog.string_agg(item, e'\\n' order by item)) as fingerprint from (
       select pg_catalog.concat_ws(' ', 'schema', coalesce(nspacl, pg_catalog.acldefault('n'::"char", nspowner))) as item
         from ns
       union all
       select pg_catalog.concat_ws(' ', 'class', c.oid, c.relname, c.relkind, c.relowner,
              coalesce(c.relacl, pg_catalog.acldefault((case when c.relkind = 'S' then 's' else 'r' end)::"char", c.relowner)),
              c.relrowsecurity, c.relforcerowsecurity, c.relpersistence, c.reloptions)
         from pg_catalog.pg_class c, ns where c.relnamespace = ns.oid
       union all
       select pg_catalog.concat_ws(' ', 'column', a.attrelid, a.attnum, a.attname, a.atttypid,
              a.atttypmod, a.attnotnull, a.atthasdef, a.attisdropped, a.attidentity, a.attgenerated,
              a.attacl)
         from pg_catalog.pg_attribute a join pg_catalog.pg_class c on c.oid = a.attrelid, ns
        where c.relnamespace = ns.oid
       union all
       select pg_catalog.concat_ws(' ', 'function', p.oid, p.proname, pg_catalog.md5(p.prosrc),
              p.prosecdef, p.provolatile, p.proowner, p.proconfig,
              coalesce(p.proacl, pg_catalog.acldefault('f'::"char", p.proowner)))
         from pg_catalog.pg_proc p, ns where p.pronamespace = ns.oid
       union all
       select pg_catalog.concat_ws(' ', 'constraint', k.oid, k.conname,
              pg_catalog.pg_get_constraintdef(k.oid), k.convalidated)
         from pg_catalog.pg_constraint k, ns where k.connamespace = ns.oid
       union all
       select pg_catalog.concat_ws(' ', 'trigger', t.oid, t.tgname, t.tgenabled)
         from pg_catalog.pg_trigger t join pg_catalog.pg_class c on c.oid = t.tgrelid, ns
        where c.relnamespace = ns.oid
       union all
       select pg_catalog.concat_ws(' ', 'default', d.oid, pg_catalog.pg_get_expr(d.adbin, d.adrelid))
         from pg_catalog.pg_attrdef d join pg_catalog.pg_class c on c.oid = d.adrelid, ns
        where c.relnamespace = ns.oid
       union all
       select pg_catalog.concat_ws(' ', 'type', y.oid, y.typname)
         from pg_catalog.pg_type y, ns where y.typnamespace = ns.oid
       union all
       select pg_catalog.concat_ws(' ', 'rule', r.oid, r.rulename, r.ev_enabled)
         from pg_catalog.pg_rewrite r join pg_catalog.pg_class c on c.oid = r.ev_class, ns
        where c.relnamespace = ns.oid
       union all
       select pg_catalog.concat_ws(' ', 'policy', o.oid)
         from pg_catalog.pg_policy o join pg_catalog.pg_class c on c.oid = o.polrelid, ns
        where c.relnamespace = ns.oid
       union all
       select pg_catalog.concat_ws(' ', 'default acl', x.oid, x.defaclacl)
         from pg_catalog.pg_default_acl x, ns where x.defaclnamespace = ns.oid
       ${rows.join('\n       ')}
     ) items`,
    [schema],
  );
  return result[0]?.fingerprint ?? '';
}

async function drop(kept: Idle): Promise<void> {
  made.delete(kept);
  await admin(kept.url)
    .query(`drop schema if exists ${quoteIdent(kept.schema)} cascade`)
    .catch(() => {});
}

/** A new schema, set up by `spec.prepare`, with what a clean return compares against. */
async function make(spec: MigratedSchemaSpec, url: string): Promise<Idle> {
  const db = await freshSchema(spec.prefix, url);
  db.pool.on('error', () => {});
  const kept: Idle = {
    schema: db.schema,
    url,
    config: db.config,
    emptied: [],
    seeded: [],
    fingerprint: '',
  };
  made.add(kept);
  try {
    try {
      await spec.prepare(db);
    } catch (error) {
      await drop(kept);
      throw error;
    }
    const { rows } = await db.pool.query<{ relname: string }>(
      `select c.relname from pg_catalog.pg_class c
        where c.relnamespace = (select oid from pg_catalog.pg_namespace where nspname = $1)
          and c.relkind in ('r', 'p') order by c.relname`,
      [db.schema],
    );
    const skip = new Set(spec.resetTables ?? []);
    for (const { relname } of rows) {
      if (skip.has(relname)) continue;
      const { rowCount } = await db.pool.query(
        `select from ${quoteIdent(db.schema)}.${quoteIdent(relname)} limit 1`,
      );
      if (rowCount === 0) kept.emptied.push(relname);
      else kept.seeded.push(relname);
    }
    const client = await db.pool.connect();
    try {
      kept.fingerprint = await fingerprint(client, db.schema, kept.seeded);
    } finally {
      client.release();
    }
  } finally {
    await db.pool.end();
  }
  return kept;
}

/**
 * Empties a returned schema and checks it is as clean as a new one; false (and nothing else
 * done) when it is not.
 */
async function reset(kept: Idle, spec: MigratedSchemaSpec): Promise<boolean> {
  const client = await admin(kept.url).connect();
  let ok = false;
  try {
    // The sweep leader's session lock goes with its session; through a pooler the server side
    // may outlive the client's close by a moment.
    const key = BigInt(sweepLockKey(kept.schema));
    const high = (key >> 32n) & 0xffffffffn;
    const low = key & 0xffffffffn;
    for (let attempt = 0; ; attempt++) {
      const { rowCount } = await client.query(
        `select from pg_catalog.pg_locks
          where locktype = 'advisory' and objsubid = 1 and classid::bigint = $1 and objid::bigint = $2`,
        [high.toString(), low.toString()],
      );
      if (rowCount === 0) break;
      if (attempt >= 20) return false;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const s = quoteIdent(kept.schema);
    await client.query('begin');
    await client.query(`set local search_path to ${s}, pg_temp`);
    await client.query(`set local lock_timeout = '2s'`);
    // Foreign keys and triggers off, so tables empty in any order.
    await client.query('set local session_replication_role = replica');
    for (const table of kept.emptied) await client.query(`delete from ${s}.${quoteIdent(table)}`);
    await client.query(
      `select pg_catalog.setval(q.seqrelid, q.seqstart, false) from pg_catalog.pg_sequence q
         join pg_catalog.pg_class c on c.oid = q.seqrelid
        where c.relnamespace = (select oid from pg_catalog.pg_namespace where nspname = $1)`,
      [kept.schema],
    );
    if (spec.resetSql) await client.query(spec.resetSql);
    const now = await fingerprint(client, kept.schema, kept.seeded);
    if (now !== kept.fingerprint) {
      await client.query('rollback');
      return false;
    }
    await client.query('commit');
    ok = true;
    return true;
  } catch {
    await client.query('rollback').catch(() => {});
    return false;
  } finally {
    client.release(!ok);
  }
}

export interface LeasedSchema {
  /**
   * A pool of this lease's own on the schema; `db.drop()` gives the schema back (ends the pool,
   * empties the schema for the next test, or drops it if it is not clean).
   */
  db: FreshSchema;
}

/** A migrated schema for one test (or one file), emptied or new. */
export async function leaseMigratedSchema(spec: MigratedSchemaSpec): Promise<LeasedSchema> {
  const url = spec.url ?? databaseUrl();
  const key = `${spec.variant}\0${url}`;
  const kept = idle.get(key)?.pop() ?? (await make(spec, url));
  const pool = new pg.Pool(kept.config);
  let given: Promise<void> | undefined;
  const giveBack = (): Promise<void> => {
    given ??= (async () => {
      await pool.end().catch(() => {});
      if (await reset(kept, spec)) {
        const list = idle.get(key) ?? [];
        list.push(kept);
        idle.set(key, list);
      } else {
        await drop(kept);
      }
    })();
    return given;
  };
  return { db: { pool, schema: kept.schema, config: kept.config, drop: giveBack } };
}

/** Drops every schema this file made (its `afterAll`); a lease still out is dropped too. */
export async function dropMigratedSchemas(): Promise<void> {
  idle.clear();
  await Promise.all([...made].map((kept) => drop(kept)));
  await Promise.all([...admins.values()].map((pool) => pool.end().catch(() => {})));
  admins.clear();
}
