import { createHash } from 'node:crypto';
import type pg from 'pg';
import {
  InvalidActionError,
  MigrationConflictError,
  StoreIsStandbyError,
  StoreUnavailableError,
} from '../../core/errors.js';
import { connectionRefusal, refuseStandby } from './connection.js';
import { migrationLocks } from './migration-locks.js';
import { embeddedMigrations } from './migrations.generated.js';
import { newerSchema } from './newer-schema.js';
import { checkoutFor } from './session.js';
import { commentName, defaultSchema, dollarTag, quoteLiteral, quoteSchema } from './sql.js';
import {
  checkedLease,
  leaseOf,
  SETTINGS_READABLE,
  switchLease,
  type TransactionalLease,
} from './transactional-lease.js';

/** Arbitrary, fixed first half of the advisory lock key; the second half is the schema's hash. */
const LOCK_CLASS = 0x5e1d;

/** One versioned schema change, as shipped in this version of the library. */
export interface Migration {
  /** The file's number: applied in ascending order, recorded in the schema's `migrations` table. */
  readonly version: number;
  /** The file name, e.g. `0001_init.sql`. */
  readonly name: string;
  /** The SQL, naming no schema: run it with `search_path` set to the target schema. */
  readonly sql: string;
  /** Hex sha-256 of `sql`; `migrate()` refuses a schema whose recorded hash differs. */
  readonly sha256: string;
  /**
   * Declared in the file (`-- sideeffect: backward-compatible`): workers of the version before it
   * keep working on the schema it leaves, so their `migrate()` accepts it during a rolling deploy.
   */
  readonly backwardCompatible: boolean;
}

/** Where the schema records what was applied; created by `migrate()` and by `migrationScript()`. */
const MIGRATIONS_TABLE = `create table if not exists migrations (
  version int primary key,
  name text not null,
  sha256 text not null,
  applied_at timestamptz not null default now()
)`;

/**
 * The first migration recorded in `migration_history` (0008 made it); earlier ones are recorded in
 * `migrations`, which 0008 leaves holding only what 0.1.0 knows, so a 0.1.0 worker restarting
 * mid-roll does not refuse the newer schema.
 */
const HISTORY_FROM = 8;

/**
 * Run after the migrations a script or migrate() applies (0013): every function a role may call
 * made security definer with a pinned search_path again, since a later CREATE OR REPLACE that
 * does not restate it resets it, and its EXECUTE taken from PUBLIC.
 */
const SECURE_FUNCTIONS = 'select secure_store_functions();';

/**
 * What a migration declared backward-compatible must leave in place for workers of the version
 * before it: every column (with its type) of every table, and every function signature (with its
 * result type). Read in the migration's transaction before and after it.
 */
const CATALOG = `select 'column ' || c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) as item
    from pg_catalog.pg_attribute a join pg_catalog.pg_class c on c.oid = a.attrelid
   where c.relnamespace = (select oid from pg_catalog.pg_namespace where nspname = pg_catalog.current_schema())
     and c.relkind in ('r', 'p', 'v') and a.attnum > 0 and not a.attisdropped
  union all
  select 'function ' || p.oid::pg_catalog.regprocedure::text || ' returns ' || pg_catalog.pg_get_function_result(p.oid)
    from pg_catalog.pg_proc p
   where p.pronamespace = (select oid from pg_catalog.pg_namespace where nspname = pg_catalog.current_schema())`;

/** The line by which a migration declares that workers of the version before it keep working. */
const BACKWARD_COMPATIBLE = /^-- sideeffect: backward-compatible$/m;

/**
 * Every migration of this version, in the order to apply them. For teams whose own migration
 * tool owns the database: feed these to it (with `search_path` set to the schema), or take the
 * whole script from `migrationScript()`. Embedded in the code, so it works from a bundle too.
 */
export function listMigrations(): readonly Migration[] {
  return embeddedMigrations.map(({ version, name, sql }) => ({
    version,
    name,
    sql,
    sha256: createHash('sha256').update(sql).digest('hex'),
    backwardCompatible: BACKWARD_COMPATIBLE.test(sql),
  }));
}

/**
 * One SQL script that brings a schema with none of these migrations up to date and records them
 * as `migrate()` does, so a worker calling `migrate()` later finds nothing to do. It takes the
 * same advisory lock as `migrate()`. `sideeffect migrate --print-sql` prints it.
 *
 * @example
 * ```ts
 * import { writeFileSync } from 'node:fs';
 * import { migrationScript } from 'sideeffect/postgres';
 * writeFileSync('V7__sideeffect.sql', migrationScript({ schema: 'sideeffect' }));
 * ```
 */
export function migrationScript(options: { schema?: string } = {}): string {
  return [...migrationStatements(options.schema ?? defaultSchema()), 'commit;', ''].join('\n');
}

/**
 * {@link migrationScript}'s statements up to its COMMIT: `sideeffect doctor` runs them into a
 * scratch schema it rolls back, to compare a live schema with what this version creates.
 */
export function migrationStatements(schemaName: string): string[] {
  const schema = quoteSchema(schemaName);
  // An existing schema is not created again: `create schema if not exists` checks CREATE on the
  // database before it looks, so the script would need it even where the DBA made the schema.
  const ensure = `if not exists (select from pg_catalog.pg_namespace where nspname = ${quoteLiteral(schemaName)}) then execute ${quoteLiteral(`create schema ${schema}`)}; end if;`;
  const tag = dollarTag(ensure);
  const parts = [
    `-- sideeffect schema ${commentName(schemaName)}: ${listMigrations()
      .map((m) => m.name)
      .join(', ')}`,
    'begin isolation level read committed;',
    `select pg_catalog.pg_advisory_xact_lock(${LOCK_CLASS}, pg_catalog.hashtext(${quoteLiteral(schema)}));`,
    `do ${tag} begin ${ensure} end ${tag};`,
    `set local search_path to ${schema}, pg_temp;`,
    `${MIGRATIONS_TABLE};`,
  ];
  for (const migration of listMigrations()) {
    parts.push(
      `-- ${migration.name}`,
      migration.sql.trimEnd(),
      migration.version >= HISTORY_FROM
        ? `insert into migration_history (version, name, sha256, backward_compatible) values (${migration.version}, ${quoteLiteral(migration.name)}, ${quoteLiteral(migration.sha256)}, ${migration.backwardCompatible});`
        : `insert into migrations (version, name, sha256) values (${migration.version}, ${quoteLiteral(migration.name)}, ${quoteLiteral(migration.sha256)});`,
    );
  }
  parts.push(SECURE_FUNCTIONS);
  return parts;
}

/** How `migrate()` finds the schema, and how long it lets a busy store table hold it up. */
export interface MigrateOptions {
  /**
   * The schema holding the store's tables and functions.
   * @default `SIDEEFFECT_SCHEMA`, else 'sideeffect'
   */
  schema?: string;
  /**
   * How long one attempt waits for a lock on a store table (an ALTER TABLE behind a long
   * transaction) before it gives up, rolls back and tries again. While migrate() waits for such a
   * lock, every store call on that table queues behind it; the bound keeps the workers running.
   * Every lock after the first is waited for at most half of Postgres's `deadlock_timeout` too:
   * in a cycle with a worker's transaction, migrate() gives up first, so Postgres never cancels
   * the worker's.
   * @default 1_000
   */
  lockTimeoutMs?: number;
  /**
   * Attempts after the first that gave up on a lock (its wait timed out, or Postgres found a
   * deadlock), with a growing pause between them (up to 2 s), each logged; then
   * StoreUnavailableError whose cause has the last attempt's SQLSTATE, nothing applied.
   * @default 30
   */
  lockRetries?: number;
  /**
   * Where migrate()'s progress goes: the line that says the schema has newer migrations this
   * version accepts, and, on an upgrade of a schema that has tables, what it applies, each retry
   * and the end.
   * @default console.warn
   */
  log?: (line: string) => void;
  /**
   * What a transactional effect's grant holds until its COMMIT (migration 0025). `'resource-row'`:
   * its resource's row, written with the next fence, as every version before 0.5. `'key-row'`:
   * only the resource's advisory lock, its key row written at the finish, its fence from the
   * store's sequence; less database work per effect, and fences no longer consecutive
   * (docs/guarantees.md). Switched once, safely with workers of any version running (migrate()
   * first waits for every transaction that wrote the resources table to end); there is no way
   * back, and asking for one is refused. Left out, the schema keeps what it has.
   * @default unchanged ('resource-row' on a new schema)
   */
  transactionalLease?: 'resource-row' | 'key-row';
}

/** Postgres gave up on a lock: its wait timed out (55P03) or it was a deadlock's victim (40P01). */
function lockLost(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  if (code === '55P03') return 'a lock wait timed out (55P03)';
  if (code === '40P01') return 'a deadlock with a running transaction (40P01)';
  return undefined;
}

/**
 * Brings the store's schema up to date: applies the migrations not yet recorded, in order, in ONE
 * transaction (all or nothing), and records each. Idempotent, and safe when several workers start
 * at once: a transaction-scoped advisory lock per schema makes them take turns, so none sees a
 * half-made schema or fails on a `create` that raced another. With nothing to apply it only reads:
 * a role with no DDL rights (a worker's runtime role) may call it at start, and an existing schema
 * is never created again (no CREATE on the database needed).
 *
 * Safe with workers running, of this version or an earlier one: the table locks the pending
 * migrations need are all taken first, in one order, each waited for at most `lockTimeoutMs`;
 * an attempt that gives up on one (a lock wait timed out, or a deadlock with a worker's
 * transaction) is rolled back whole and retried after a growing pause (`lockRetries`), each retry
 * logged: store calls queued behind migrate's lock request go on meanwhile instead of stalling
 * behind a long transaction, and no worker's transaction is cancelled for it.
 *
 * A schema with migrations newer than this version: accepted, with a log line, when every one of
 * them declares itself backward-compatible (workers of the previous version keep working on it,
 * as during a rolling deploy, and the schema lacks none of this version's); refused with
 * MigrationConflictError otherwise (the worker's start check and `sideeffect migrate --status`
 * decide and word it the same way), as is a schema whose
 * applied migrations were edited afterwards: running functions this code does not know is how a
 * state machine silently changes under a worker. Returns the names of the migrations it applied
 * (empty when already up to date). Connected to a standby (read-only, in recovery), it refuses
 * with StoreIsStandbyError naming the server, before it reads anything. Any other failure (the
 * database unreachable, a connection lost, a statement refused) is a StoreUnavailableError with the cause, and nothing was applied.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await migrate(pool, { schema: 'sideeffect' }); // before the worker starts
 * ```
 */
export async function migrate(pool: pg.Pool, options: MigrateOptions = {}): Promise<string[]> {
  return migrateFiles(pool, options, listMigrations());
}

/**
 * migrate() with the migrations given instead of this version's: how a test plays a later
 * version's migration against the checks this one makes. Not exported from the package.
 */
export async function migrateFiles(
  pool: pg.Pool,
  options: MigrateOptions,
  files: readonly Migration[],
): Promise<string[]> {
  const schemaName = options.schema ?? defaultSchema();
  const schema = quoteSchema(schemaName);
  const lockTimeoutMs = options.lockTimeoutMs ?? 1_000;
  if (!Number.isSafeInteger(lockTimeoutMs) || lockTimeoutMs < 1 || lockTimeoutMs > 2 ** 31 - 1) {
    throw new InvalidActionError(
      'lockTimeoutMs',
      `must be a positive integer, got ${lockTimeoutMs}`,
    );
  }
  const retries = options.lockRetries ?? 30;
  if (!Number.isSafeInteger(retries) || retries < 0) {
    throw new InvalidActionError('lockRetries', `must be a non-negative integer, got ${retries}`);
  }
  const lease = checkedLease(options.transactionalLease);
  const log = options.log ?? ((line: string) => console.warn(line));
  for (let attempt = 0; ; attempt += 1) {
    try {
      return await migrateOnce(pool, schemaName, schema, lockTimeoutMs, log, files, attempt, lease);
    } catch (error) {
      // A user, password, database or privilege Postgres refuses: no retry or outage, a mistake.
      const refused = connectionRefusal(pool, error, schemaName);
      if (refused) throw refused;
      const cause = error instanceof StoreUnavailableError ? error.cause : undefined;
      const lost = lockLost(cause);
      if (!lost) throw error;
      if (attempt >= retries) {
        const last = cause as Error & { code: string };
        throw new StoreUnavailableError(
          'migrate',
          Object.assign(
            new Error(
              `${attempt + 1} attempts on schema ${schema} each gave up on a lock, nothing applied; the last: ${last.message}`,
            ),
            { code: last.code, cause: last },
          ),
        );
      }
      const pause = Math.round(Math.min(2_000, 50 * 2 ** attempt) * (0.5 + Math.random() / 2));
      log(
        `sideeffect: migrate of schema ${schema}, attempt ${attempt + 1} of ${retries + 1}: ${lost}; nothing applied, trying again in ${pause} ms`,
      );
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

/** One attempt of migrate(), in one transaction. */
async function migrateOnce(
  pool: pg.Pool,
  schemaName: string,
  schema: string,
  lockTimeoutMs: number,
  log: (line: string) => void,
  files: readonly Migration[],
  attempt: number,
  lease: TransactionalLease | undefined,
): Promise<string[]> {
  const session = await checkoutFor(pool, 'migrate');
  const { client } = session;
  const exists = async (relation: string): Promise<boolean> => {
    const { rows } = await client.query<{ found: boolean }>(
      'select pg_catalog.to_regclass($1) is not null as found',
      [`${schema}.${relation}`],
    );
    return rows[0]!.found;
  };
  try {
    // A standby reads like the primary: "up to date" about a copy, or a confusing refusal later.
    await refuseStandby(client, pool);
    await client.query('begin isolation level read committed');
    // Same key as every earlier release (0.1.0 included): a worker of the previous version starting
    // mid-roll takes turns with this one. Waiting here blocks no store call.
    await client.query(
      'select pg_catalog.pg_advisory_xact_lock($1::integer, pg_catalog.hashtext($2::text))',
      [LOCK_CLASS, schema],
    );
    await client.query(`set local lock_timeout = ${lockTimeoutMs}`);
    // `create schema if not exists` checks CREATE on the database before it looks: a role that
    // owns a schema its DBA created, or a runtime role, must not need it.
    const { rowCount } = await client.query(
      'select from pg_catalog.pg_namespace where nspname = $1::text',
      [schemaName],
    );
    if (rowCount === 0) await client.query(`create schema ${schema}`);
    await client.query(`set local search_path to ${schema}, pg_temp`);
    const inMigrations = await exists('migrations');
    const inHistory = await exists('migration_history');
    if (!inMigrations) await client.query(MIGRATIONS_TABLE);
    const { rows } = await client.query<{
      version: number;
      name: string;
      sha256: string;
      backward_compatible: boolean;
    }>(
      inHistory
        ? `select version, name, sha256, false as backward_compatible from migrations
           union all select version, name, sha256, backward_compatible from migration_history
           order by version`
        : 'select version, name, sha256, false as backward_compatible from migrations order by version',
    );
    const known = new Map(files.map((f) => [f.version, f]));
    for (const row of rows) {
      const file = known.get(row.version);
      if (file && file.sha256 !== row.sha256) {
        throw new MigrationConflictError(
          `migration ${row.name} was changed after it was applied to ${schema}`,
        );
      }
    }
    const applied = new Set(rows.map((row) => row.version));
    const pending = files.filter((f) => !applied.has(f.version));
    const newer = rows.filter((row) => !known.has(row.version));
    const verdict = newerSchema({
      schema: schemaName,
      pending: pending.map((f) => f.name),
      unknown: newer.map((row) => row.name),
      unknownCompatible: newer.every((row) => row.backward_compatible),
    });
    if (verdict && 'refused' in verdict) throw verdict.refused;
    if (verdict) log(`sideeffect: ${verdict.accepted}`);
    if (pending.length > 0) await lockUpFront(client, schema, pending, lockTimeoutMs, log, attempt);
    const catalog = async (): Promise<Set<string>> =>
      new Set((await client.query<{ item: string }>(CATALOG)).rows.map((row) => row.item));
    // A schema with no migration recorded has no worker of any version on it (each records what
    // it applied under this same lock), so no claim below protects anyone: a fresh install skips
    // the two catalog reads per migration. An upgrade checks every claim it applies.
    const fresh = rows.length === 0;
    for (const file of pending) {
      // A backward-compatible claim is checked, not trusted: a column renamed, dropped or
      // retyped (or a function signature gone or answering another shape) breaks the workers of
      // the version before it, which accept the schema because of the claim.
      const before = file.backwardCompatible && !fresh ? await catalog() : undefined;
      await client.query(file.sql);
      if (before) {
        const after = await catalog();
        const gone = [...before].filter((item) => !after.has(item));
        if (gone.length > 0) {
          throw new MigrationConflictError(
            `migration ${file.name} declares itself backward-compatible but removes or changes what workers of the previous version use: ${gone.join('; ')}`,
          );
        }
      }
      await client.query(
        file.version >= HISTORY_FROM
          ? 'insert into migration_history (version, name, sha256, backward_compatible) values ($1, $2, $3, $4)'
          : 'insert into migrations (version, name, sha256) values ($1, $2, $3)',
        file.version >= HISTORY_FROM
          ? [file.version, file.name, file.sha256, file.backwardCompatible]
          : [file.version, file.name, file.sha256],
      );
    }
    if (pending.length > 0) {
      const { rows: secure } = await client.query<{ found: boolean }>(
        "select pg_catalog.to_regprocedure('secure_store_functions()') is not null as found",
      );
      if (secure[0]!.found) await client.query(SECURE_FUNCTIONS);
    }
    if (lease !== undefined) await switchLease(client, schemaName, lease, log);
    await client.query('commit');
    session.release();
    if (attempt > 0) {
      log(
        `sideeffect: migrate of schema ${schema} applied ${pending.length} migrations on attempt ${attempt + 1}`,
      );
    }
    return pending.map((f) => f.name);
  } catch (error) {
    await client.query('rollback').catch(() => {});
    session.release(true);
    if (
      error instanceof MigrationConflictError ||
      error instanceof StoreIsStandbyError ||
      error instanceof InvalidActionError
    )
      throw error;
    throw new StoreUnavailableError('migrate', error);
  }
}

/**
 * Takes every table lock the pending migrations need against running workers, in one order, before
 * any of them runs: a migration that took them as its statements reached them held one while it
 * waited for another that a worker's transaction held while queued behind the first.
 *
 * Workers take the store's tables in both orders (0.1.0's acquire reads keys before it locks its
 * resource, its complete the reverse), so whichever table migrate() waits for first, the calls
 * that arrive meanwhile take the other and queue behind it: a cycle nearly every time under
 * steady traffic. So it first asks for all of them without waiting (NOWAIT), again and again for
 * up to lockTimeoutMs, until an instant when no worker's statement holds any: nobody queues
 * behind a request that never waits. Only then does it wait: the first lock lockTimeoutMs
 * (nothing of the store is held yet, so no cycle), each later one at most half of
 * `deadlock_timeout` too, so in a cycle this transaction gives up (and the attempt is retried)
 * before Postgres picks the worker's as the victim.
 */
async function lockUpFront(
  client: pg.PoolClient,
  schema: string,
  pending: readonly Migration[],
  lockTimeoutMs: number,
  log: (line: string) => void,
  attempt: number,
): Promise<void> {
  const { rows } = await client.query<{ table: string; cycle_ms: number }>(
    `select c.relname as table,
            (select setting::integer from pg_catalog.pg_settings where name = 'deadlock_timeout') as cycle_ms
       from pg_catalog.pg_class c
      where c.relnamespace = (select oid from pg_catalog.pg_namespace where nspname = pg_catalog.current_schema())
        and c.relkind in ('r', 'p') and c.relname not in ('migrations', 'migration_history')`,
  );
  // A schema with no store table yet (a fresh one): nobody to wait for, nothing to say.
  if (rows.length === 0) return;
  const locks = migrationLocks(
    pending.map((f) => f.sql),
    new Set(rows.map((row) => row.table)),
  );
  if (attempt === 0) {
    log(
      `sideeffect: migrating schema ${schema}: ${pending.map((f) => f.name).join(', ')}${
        locks.length > 0
          ? `; locking ${locks.map((l) => `${l.table} (${l.mode})`).join(', ')} first`
          : ''
      }`,
    );
  }
  if (locks.length === 0) return;
  const lockAll = async (nowait: boolean) => {
    for (const { table, mode } of locks) {
      await client.query(`lock table only "${table}" in ${mode} mode${nowait ? ' nowait' : ''}`);
    }
  };
  const until = performance.now() + lockTimeoutMs;
  await client.query('savepoint sideeffect_locks');
  for (;;) {
    try {
      await lockAll(true);
      await client.query('release savepoint sideeffect_locks');
      return;
    } catch (error) {
      if ((error as { code?: unknown }).code !== '55P03') throw error;
      await client.query('rollback to savepoint sideeffect_locks');
    }
    if (performance.now() >= until) break;
    await new Promise((resolve) => setTimeout(resolve, 1 + Math.random() * 4));
  }
  await client.query('release savepoint sideeffect_locks');
  const cycleMs = Math.max(1, Math.min(lockTimeoutMs, Math.floor(rows[0]!.cycle_ms / 2)));
  for (const [i, { table, mode }] of locks.entries()) {
    if (i === 1) await client.query(`set local lock_timeout = ${cycleMs}`);
    await client.query(`lock table only "${table}" in ${mode} mode`);
  }
  if (locks.length > 1) await client.query(`set local lock_timeout = ${lockTimeoutMs}`);
}

/** What a schema holds against what this version ships; see {@link migrationStatus}. */
export interface MigrationStatus {
  schema: string;
  /** Recorded in the schema, oldest first, with when (ISO-8601). */
  applied: Array<{ name: string; appliedAt: string }>;
  /** Shipped by this version and not yet applied: what `migrate()` would apply. */
  pending: string[];
  /** Recorded in the schema and unknown to this version: a newer sideeffect migrated it. */
  unknown: string[];
  /** Every unknown migration declared itself backward-compatible: this version still runs on the schema. */
  unknownCompatible: boolean;
  /** What its transactional grants hold (see MigrateOptions); absent before migration 0025. */
  transactionalLease?: TransactionalLease;
}

/**
 * Reads, without changing anything, which migrations a schema has and which this version would
 * apply, so a worker can refuse to start on a schema nobody migrated (or a newer one) with the
 * fix in the message, and an operator can check before `migrate`. A schema or `migrations`
 * table that does not exist reads as nothing applied.
 */
export async function migrationStatus(
  pool: pg.Pool,
  options: { schema?: string } = {},
): Promise<MigrationStatus> {
  const name = options.schema ?? defaultSchema();
  const schema = quoteSchema(name);
  let rows: Array<{
    version: number;
    name: string;
    applied_at: Date;
    backward_compatible: boolean;
  }> = [];
  let lease: TransactionalLease | undefined;
  try {
    const found = await pool.query<{ migrations: boolean; history: boolean; settings: boolean }>(
      `select pg_catalog.to_regclass($2::text) is not null as migrations,
              pg_catalog.to_regclass($3::text) is not null as history,
              ${SETTINGS_READABLE} as settings`,
      [`${schema}.settings`, `${schema}.migrations`, `${schema}.migration_history`],
    );
    const { migrations, history, settings } = found.rows[0]!;
    if (settings) lease = await leaseOf(pool, schema);
    const recorded = `select version, name, applied_at, false as backward_compatible from ${schema}.migrations`;
    if (migrations)
      rows = (
        await pool.query(
          history
            ? `${recorded} union all select version, name, applied_at, backward_compatible from ${schema}.migration_history order by version`
            : `${recorded} order by version`,
        )
      ).rows;
  } catch (error) {
    throw (
      connectionRefusal(pool, error, name) ?? new StoreUnavailableError('migrationStatus', error)
    );
  }
  const shipped = listMigrations();
  const recorded = new Set(rows.map((row) => row.version));
  const known = new Set(shipped.map((file) => file.version));
  const unknown = rows.filter((row) => !known.has(row.version));
  return {
    schema: name,
    applied: rows.map((row) => ({ name: row.name, appliedAt: row.applied_at.toISOString() })),
    pending: shipped.filter((file) => !recorded.has(file.version)).map((file) => file.name),
    unknown: unknown.map((row) => row.name),
    unknownCompatible: unknown.every((row) => row.backward_compatible),
    ...(lease === undefined ? {} : { transactionalLease: lease }),
  };
}
