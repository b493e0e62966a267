/**
 * migrate() during a rolling deploy (issues 21 and 23): a worker of the previous release that
 * restarts against the newest schema starts (0.1.0's recorded statements, and this version's own
 * migrate() against a schema with newer backward-compatible migrations), and a long transaction
 * on a store table neither stalls migrate() for ever nor the store calls queued behind it.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { payloadDigest } from '../../src/store/digest.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { listMigrations, type Migration, migrateFiles } from '../../src/store/postgres/migrate.js';
import { bytes } from '../support/bytes.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { migrate010, SQL_0_1_0 } from './fixtures/release-0.1.0.js';

let db: FreshSchema;
beforeAll(async () => {
  db = await freshSchema('pg_rolling');
});
afterAll(() => db?.drop());

const quoted = (schema: string) => `"${schema.replaceAll('"', '""')}"`;

describe('the previous release against the newest schema', () => {
  it("a 0.1.0 worker's migrate() at start accepts it, and its statements keep working", async () => {
    const schema = `${db.schema}_010`;
    const s = quoted(schema);
    try {
      await migrate(db.pool, { schema });
      const client = await db.pool.connect();
      try {
        await migrate010(client, s);
        await migrate010(client, s);
      } finally {
        client.release();
      }
      const q = async (sql: string, values: unknown[]) =>
        (await db.pool.query(sql, values)).rows[0];
      const digest = payloadDigest(new Uint8Array());
      const grant = await q(SQL_0_1_0.acquire(s), ['k1', 'r1', digest, 'unknown', 10_000, false]);
      expect(grant).toMatchObject({ o_outcome: 'applied', o_fence: '1' });
      expect(await q(SQL_0_1_0.renew(s), ['k1', 'r1', 1, 10_000, true])).toMatchObject({
        o_outcome: 'renewed',
      });
      const paid = Buffer.from(bytes('paid'));
      expect(await q(SQL_0_1_0.complete(s), ['k1', 'r1', 1, paid])).toMatchObject({
        o_outcome: 'completed',
      });
      expect(
        await q(SQL_0_1_0.acquire(s), ['k1', 'r1', digest, 'unknown', 10_000, false]),
      ).toMatchObject({ o_outcome: 'replayed', o_result: paid });
      await q(SQL_0_1_0.acquire(s), ['k2', 'r2', digest, 'unknown', 10_000, true]);
      expect(await q(SQL_0_1_0.markUncertain(s), ['k2', 'r2', 1, 'lost'])).toEqual({
        o_outcome: 'marked',
      });
      expect(await q(SQL_0_1_0.resolve(s), ['k2', false, null, 'checked', 'v0.1.0'])).toMatchObject(
        { o_outcome: 'resolved' },
      );
      await q(SQL_0_1_0.acquire(s), ['k3', 'r3', digest, 'unknown', 10_000, false]);
      expect(await q(SQL_0_1_0.release(s), ['k3', 'r3', 1])).toEqual({ o_outcome: 'released' });
      expect(await q(SQL_0_1_0.sweep(s), [])).toEqual({ o_uncertain: [], o_freed: [] });
      expect(await q(SQL_0_1_0.purge(s), [86_400_000])).toEqual({ o_purged: '0' });
      expect(await q(SQL_0_1_0.inspect(s), ['k1'])).toMatchObject({ state: 'done' });
      expect((await db.pool.query(SQL_0_1_0.list(s), [null, 10])).rows).toHaveLength(3);
      expect((await db.pool.query(SQL_0_1_0.events(s), ['k2'])).rows.length).toBeGreaterThan(0);
      // And this version still reads every migration, 0.1.0's view of them notwithstanding.
      expect(await migrate(db.pool, { schema })).toEqual([]);
    } finally {
      await db.pool.query(`drop schema if exists ${s} cascade`);
    }
  });

  it('accepts newer migrations declared backward-compatible, with a log line; refuses others', async () => {
    const schema = `${db.schema}_newer`;
    const s = quoted(schema);
    try {
      await migrate(db.pool, { schema });
      await db.pool.query(
        `insert into ${s}.migration_history (version, name, sha256, backward_compatible)
         values (9998, '9998_next_release.sql', 'x', true)`,
      );
      const lines: string[] = [];
      expect(await migrate(db.pool, { schema, log: (line) => lines.push(line) })).toEqual([]);
      expect(lines).toEqual([expect.stringMatching(/9998_next_release\.sql.*backward-compatible/)]);
      const store = new PgStore({ pool: db.pool, schema });
      expect((await store.acquire({ key: 'k', resource: 'r' }, 10_000)).outcome).toBe('granted');
      // A version whose own migration the schema lacks refuses it: it never migrated it.
      const own: Migration = {
        version: 9997,
        name: '9997_own.sql',
        sql: 'select 1;\n',
        sha256: 'z',
        backwardCompatible: true,
      };
      await expect(
        migrateFiles(db.pool, { schema, log: () => {} }, [...listMigrations(), own]),
      ).rejects.toMatchObject({
        code: 'MIGRATION_CONFLICT',
        message: expect.stringMatching(/\(9998_next_release\.sql\).*it lacks 9997_own\.sql/),
      });
      await db.pool.query(
        `insert into ${s}.migration_history (version, name, sha256)
         values (9999, '9999_breaking.sql', 'y')`,
      );
      await expect(migrate(db.pool, { schema, log: () => {} })).rejects.toMatchObject({
        code: 'MIGRATION_CONFLICT',
        message: expect.stringMatching(
          /\(9998_next_release\.sql, 9999_breaking\.sql\).*not all of them declared backward-compatible/,
        ),
      });
    } finally {
      await db.pool.query(`drop schema if exists ${s} cascade`);
    }
  });
});

describe('upgrading under running 0.1.0 workers (issue 31)', () => {
  it("a 0.1.0 worker's resolve, prepared before the upgrade, answers on its first try after it", async () => {
    const schema = `${db.schema}_warm`;
    const s = quoted(schema);
    const worker = new pg.Client(db.config);
    await worker.connect();
    try {
      // The schema as 0.1.0 left it: 0001 only.
      await db.pool.query(`create schema ${s}`);
      const setup = await db.pool.connect();
      try {
        await setup.query('begin');
        await setup.query(`set local search_path to ${s}, pg_temp`);
        await setup.query(`create table migrations (
           version int primary key, name text not null, sha256 text not null,
           applied_at timestamptz not null default now())`);
        const [init] = listMigrations();
        await setup.query(init!.sql);
        await setup.query('insert into migrations (version, name, sha256) values ($1, $2, $3)', [
          init!.version,
          init!.name,
          init!.sha256,
        ]);
        await setup.query('commit');
      } finally {
        setup.release();
      }
      // 0.1.0's PgStore sends its statements named: prepared once per connection.
      const resolve = (key: string) =>
        worker.query({
          name: 'sideeffect_resolve_010',
          text: SQL_0_1_0.resolve(s),
          values: [key, false, null, 'checked', 'v0.1.0'],
        });
      expect((await resolve('nobody')).rows[0]).toMatchObject({ o_outcome: 'not_uncertain' });
      await migrate(db.pool, { schema, log: () => {} });
      expect((await resolve('nobody')).rows[0]).toEqual({
        o_outcome: 'not_uncertain',
        o_result: null,
        o_state: 'unknown',
      });
    } finally {
      await worker.end();
      await db.pool.query(`drop schema if exists ${s} cascade`);
    }
  });

  it('refuses a migration that claims backward-compatible but renames or drops what the previous version uses; nothing applied', async () => {
    const schema = `${db.schema}_claims`;
    const s = quoted(schema);
    const next = (version: number, sql: string): Migration => ({
      version,
      name: `${version}_next.sql`,
      sql: `-- sideeffect: backward-compatible\n${sql}\n`,
      sha256: `sha-${version}`,
      backwardCompatible: true,
    });
    try {
      await migrate(db.pool, { schema, log: () => {} });
      for (const [lie, gone] of [
        ['alter table keys rename column reason to why;', 'column keys.reason text'],
        ['alter table events drop column actor;', 'column events.actor text'],
        ['alter table keys alter column fence type numeric;', 'column keys.fence bigint'],
        ['drop function renew(text, text, bigint, bigint, boolean);', 'function renew('],
      ] as const) {
        await expect(
          migrateFiles(db.pool, { schema }, [...listMigrations(), next(9990, lie)]),
          lie,
        ).rejects.toMatchObject({
          code: 'MIGRATION_CONFLICT',
          message: expect.stringContaining(gone),
        });
      }
      const { rows } = await db.pool.query(
        `select (select count(*)::int from ${s}.migration_history where version = 9990) as recorded,
                pg_catalog.to_regclass($1) is not null as keys`,
        [`${s}.keys`],
      );
      expect(rows[0]).toEqual({ recorded: 0, keys: true });
      await db.pool.query(`select reason from ${s}.keys limit 0`);
      // An honest one (a column added) is applied.
      expect(
        await migrateFiles(db.pool, { schema }, [
          ...listMigrations(),
          next(9991, 'alter table keys add column note text;'),
        ]),
      ).toEqual(['9991_next.sql']);
    } finally {
      await db.pool.query(`drop schema if exists ${s} cascade`);
    }
  });
});

describe('migrate() behind a long transaction', () => {
  /** A schema as a release with migrations 0001-0005 left it: 0006 has an ALTER TABLE keys to do. */
  async function schemaAt0005(schema: string): Promise<void> {
    const client = await db.pool.connect();
    try {
      await client.query('begin');
      await client.query(`create schema ${quoted(schema)}`);
      await client.query(`set local search_path to ${quoted(schema)}, pg_temp`);
      await client.query(`create table migrations (
         version int primary key, name text not null, sha256 text not null,
         applied_at timestamptz not null default now())`);
      for (const m of listMigrations().filter((m) => m.version <= 5)) {
        await client.query(m.sql);
        await client.query('insert into migrations (version, name, sha256) values ($1, $2, $3)', [
          m.version,
          m.name,
          m.sha256,
        ]);
      }
      await client.query('commit');
    } finally {
      client.release();
    }
  }

  it('lets go of its lock request after lockTimeoutMs, so queued store calls go on, and retries until it gets through', async () => {
    const schema = `${db.schema}_lock`;
    const s = quoted(schema);
    const holder = new pg.Client(db.config);
    await holder.connect();
    try {
      await schemaAt0005(schema);
      const store = new PgStore({ pool: db.pool, schema });
      await holder.query('begin');
      await holder.query(`lock table ${s}.keys in access share mode`);
      const migrating = migrate(db.pool, { schema, lockTimeoutMs: 100, lockRetries: 1_000 });
      migrating.catch(() => {});
      // Wait until migrate's ALTER TABLE is queued for the lock.
      for (;;) {
        const { rowCount } = await db.pool.query(
          `select from pg_locks where relation = '${s}.keys'::regclass
             and mode = 'AccessExclusiveLock' and not granted`,
        );
        if (rowCount) break;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      // A store call on that table, while the long transaction still holds it: it must answer
      // (without a lock timeout it queued behind migrate's request until the transaction ended).
      const stalled = Symbol('stalled');
      const answer = await Promise.race([
        store.inspect('nobody'),
        new Promise((resolve) => setTimeout(() => resolve(stalled), 30_000)),
      ]);
      expect(answer).toBeUndefined();
      await holder.query('commit');
      expect(await migrating).toEqual(
        listMigrations()
          .filter((m) => m.version > 5)
          .map((m) => m.name),
      );
    } finally {
      await holder.query('rollback').catch(() => {});
      await holder.end();
      await db.pool.query(`drop schema if exists ${s} cascade`);
    }
  });

  it('gives up after lockRetries with the lock timeout as the cause, nothing applied', async () => {
    const schema = `${db.schema}_giveup`;
    const s = quoted(schema);
    const holder = new pg.Client(db.config);
    await holder.connect();
    try {
      await schemaAt0005(schema);
      await holder.query('begin');
      await holder.query(`lock table ${s}.keys in access share mode`);
      await expect(
        migrate(db.pool, { schema, lockTimeoutMs: 50, lockRetries: 2 }),
      ).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE', cause: { code: '55P03' } });
      await holder.query('commit');
      const { rows } = await db.pool.query(`select max(version) as v from ${s}.migrations`);
      expect(rows[0].v).toBe(5);
    } finally {
      await holder.query('rollback').catch(() => {});
      await holder.end();
      await db.pool.query(`drop schema if exists ${s} cascade`);
    }
  });
});
