/**
 * A transactional effect's work runs on a pooled connection and may change its session; the
 * connection must reach its next user (often the store itself) as it came out of the pool, or be
 * discarded. With a pool of one, each of the session changes of issue 31 is made by an effect and
 * the next user of the pool must see the session as it was before. Through PgBouncer (transaction
 * mode) discarding the client connection does nothing, so the bouncer's next client, on the same
 * server connection, must see the server's defaults, and what would outlive the commit there is
 * refused. The work's settings hold through its COMMIT (issue 39), except what would weaken the
 * store's record of the key: a trigger on the keys table records what the key's insert ran with
 * (a lowered synchronous_commit raised, session_replication_role refused).
 */
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Runner, type TransactionContext } from '../../src/core/index.js';
import { PgStore } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

const TTL = 10_000;

/** What the next user of a connection sees of its session. */
const VIEW = `select current_user as role,
  current_setting('search_path') as search_path,
  current_setting('statement_timeout') as statement_timeout,
  current_setting('synchronous_commit') as synchronous_commit,
  current_setting('session_replication_role') as replication_role,
  coalesce(current_setting('app.tenant', true), '') as tenant,
  current_setting('row_security') as row_security,
  current_setting('work_mem') as work_mem,
  current_setting('extra_float_digits') as extra_float_digits,
  current_setting('default_transaction_deferrable') as deferrable,
  (select count(*) from pg_locks where locktype = 'advisory' and pid = pg_backend_pid())::int as advisory,
  (select count(*) from pg_class where relnamespace = pg_my_temp_schema())::int as temp,
  (select count(*) from pg_prepared_statements where from_sql)::int as prepared,
  (select count(*) from pg_listening_channels())::int as listening`;

/** The session changes of issue 31, each as an effect's work makes it (after its own insert). */
const CHANGES: [string, string][] = [
  ['synchronous_commit = off', 'set synchronous_commit = off'],
  ['session_replication_role = replica', 'set session_replication_role = replica'],
  ['a custom setting for row-level security', `set app.tenant = 'tenant-1'`],
  ['row_security = off', 'set row_security = off'],
  ['a session advisory lock', 'select pg_advisory_lock(31)'],
  ['a temp table', 'create temp table scratch (x int)'],
  ['a prepared statement', 'prepare leaked as select 1'],
  ['LISTEN', 'listen leaked_channel'],
  ['work_mem', `set work_mem = '64MB'`],
  ['extra_float_digits', 'set extra_float_digits = 0'],
  ['default_transaction_deferrable', 'set default_transaction_deferrable = on'],
  [
    'search_path and statement_timeout',
    `set search_path = pg_catalog; set statement_timeout = '1ms'`,
  ],
  ['all of them at once, with SET LOCAL too', ''],
];
/** Refused (TRANSACTION_MISUSE) rather than applied: the store's record would skip its triggers. */
const REFUSED = 'set session_replication_role = replica';
const ALL = CHANGES.slice(0, -1)
  .map(([, sql]) => sql)
  .filter((sql) => sql !== REFUSED)
  .join('; ');

describe('PgStore transactional effects give the connection back as it came out', () => {
  let h: PgHarness;
  let seq = 0;
  beforeEach(async () => {
    h = await pgHarness('pg_tx_session', { movableClock: false });
    await h.db.pool.query(`
      create table ledger (key text not null, fence bigint not null);
      create table seen (key text, synchronous_commit text, replication_role text, tenant text,
                         work_mem text, search_path text, statement_timeout text);
      create function record_seen() returns trigger language plpgsql as $$ begin
        insert into ${h.db.schema}.seen values (new.key, current_setting('synchronous_commit'),
          current_setting('session_replication_role'), coalesce(current_setting('app.tenant', true), ''),
          current_setting('work_mem'), current_setting('search_path'),
          current_setting('statement_timeout'));
        return new; end $$;
      create trigger record_seen after insert on keys for each row execute function record_seen();
      alter table keys enable always trigger record_seen;
    `);
  });
  afterEach(() => h.close());

  const effect =
    (key: string, change: string) =>
    async ({ tx, fence }: TransactionContext<pg.PoolClient>) => {
      await tx.query('insert into ledger (key, fence) values ($1, $2)', [key, fence]);
      if (change) await tx.query(change);
      return { payload: bytes('ok') };
    };

  for (const [name, sql] of CHANGES) {
    it(`${name}: the next user of a pool of one sees the session as before, and the key was written no less durably than the connection's settings`, async () => {
      const pool = new pg.Pool({ ...h.db.config, max: 1 });
      pool.on('error', () => {});
      try {
        const store = new PgStore({ pool, schema: h.db.schema });
        const runner = new Runner(store, { ttlMs: TTL });
        const view = async () => (await pool.query(VIEW)).rows[0];
        const before = await view();
        seq += 1;
        const key = `session-${seq}`;
        const change =
          sql || `set local work_mem = '32MB'; set local synchronous_commit = off; ${ALL}`;
        const done = await runner.executeInTransaction(
          { key, resource: `r-${seq}`, payload: bytes('p') },
          effect(key, change),
        );
        const kept = (await h.db.pool.query('select 1 from ledger where key = $1', [key])).rowCount;
        const { rows } = await h.db.pool.query('select * from seen where key = $1', [key]);
        if (sql === REFUSED) {
          expect(done.outcome).toBe('failed');
          if (done.outcome === 'failed')
            expect(done.error).toMatchObject({
              code: 'TRANSACTION_MISUSE',
              misuse: 'commit-settings',
            });
          expect(kept).toBe(0);
          expect(rows).toEqual([]);
          expect(await view()).toEqual(before);
          return;
        }
        expect(done.outcome).toBe('applied');
        expect(kept).toBe(1);
        expect(await view()).toEqual(before);
        // The store's own write of the key ran with the work's settings, its durability raised
        // back to the connection's.
        expect(rows).toHaveLength(1);
        expect(rows[0]).toMatchObject({
          synchronous_commit: before.synchronous_commit,
          replication_role: before.replication_role,
        });
        // The store's functions run with their own pinned path (the schema, then pg_temp).
        expect(rows[0].search_path.replace(/, pg_temp$/, '')).toBe(before.search_path);
        // And the next effect on the pool works as usual.
        seq += 1;
        const next = await runner.executeInTransaction(
          { key: `session-${seq}`, resource: `r-${seq}`, payload: bytes('p') },
          effect(`session-${seq}`, ''),
        );
        expect(next.outcome).toBe('applied');
        expect(await view()).toEqual(before);
      } finally {
        await pool.end();
      }
    });
  }

  it('a connection the work left alone goes back to the pool (no reconnect), after an effect that reset settings too', async () => {
    const pool = new pg.Pool({ ...h.db.config, max: 1 });
    pool.on('error', () => {});
    try {
      // A pool whose owner sets a session value on connect: the store puts that back, not the default.
      pool.on('connect', (client) => {
        client.query(`set work_mem = '8MB'`).catch(() => {});
      });
      const store = new PgStore({ pool, schema: h.db.schema });
      const runner = new Runner(store, { ttlMs: TTL });
      const backend = async () =>
        (await pool.query(`select pg_backend_pid() as pid, current_setting('work_mem') as wm`))
          .rows[0];
      const first = await backend();
      expect(first.wm).toBe('8MB');
      for (const change of ['', `set work_mem = '64MB'; set app.tenant = 'x'`]) {
        seq += 1;
        const done = await runner.executeInTransaction(
          { key: `keep-${seq}`, resource: `r-${seq}`, payload: bytes('p') },
          effect(`keep-${seq}`, change),
        );
        expect(done.outcome).toBe('applied');
        expect(await backend()).toEqual(first);
      }
    } finally {
      await pool.end();
    }
  });
});

describe('through PgBouncer (transaction mode), the bouncer next client gets the server defaults', () => {
  let bouncer: PgBouncer;
  let h: PgHarness;
  let seq = 0;
  beforeAll(async () => {
    // One server connection: every client of the bouncer gets the one the effect ran on.
    bouncer = await startPgBouncer({ serverConnections: 1 });
  });
  afterAll(async () => {
    await bouncer?.stop();
  });
  beforeEach(async () => {
    h = await pgHarness('pg_tx_bouncer', { movableClock: false });
    await h.db.pool.query('create table ledger (key text not null, fence bigint not null)');
  });
  afterEach(() => h.close());

  const run = async (change: string) => {
    const pool = new pg.Pool({ connectionString: bouncer.url, max: 1 });
    pool.on('error', () => {});
    const other = new pg.Client({ connectionString: bouncer.url });
    await other.connect();
    try {
      const store = new PgStore({ pool, schema: h.db.schema, transactionPooling: true });
      const before = (await other.query(VIEW)).rows[0];
      seq += 1;
      const key = `bouncer-${seq}`;
      const schema = h.db.schema;
      const done = await new Runner(store, { ttlMs: TTL }).executeInTransaction<pg.PoolClient>(
        { key, resource: `r-${seq}`, payload: bytes('p') },
        async ({ tx, fence }) => {
          await tx.query(`insert into "${schema}".ledger (key, fence) values ($1, $2)`, [
            key,
            fence,
          ]);
          await tx.query(change);
          return { payload: bytes('ok') };
        },
      );
      const rows = (await h.db.pool.query('select 1 from ledger where key = $1', [key])).rowCount;
      return { done, rows, before, after: (await other.query(VIEW)).rows[0] };
    } finally {
      await other.end();
      await pool.end();
    }
  };

  it('session-level SETs (search_path, statement_timeout, a custom setting) are put back after the commit; SET LOCAL works as usual', async () => {
    const { done, rows, before, after } = await run(
      `set search_path = pg_catalog; set app.tenant = 't'; set local work_mem = '64MB'; set synchronous_commit = off; set statement_timeout = '1ms'`,
    );
    expect(done.outcome).toBe('applied');
    expect(rows).toBe(1);
    expect(after).toEqual(before);
  });

  it('LISTEN is undone in the same round trip as the commit', async () => {
    const { done, after, before } = await run('listen leaked_channel');
    expect(done.outcome).toBe('applied');
    expect(after).toEqual(before);
  });

  for (const [name, change] of [
    ['a session advisory lock', 'select pg_advisory_lock(31)'],
    ['a prepared statement', 'prepare leaked as select 1'],
    ['a temp table', 'create temp table scratch (x int)'],
  ]) {
    it(`${name} is refused before the commit (TRANSACTION_MISUSE, nothing kept) and gone for the next client`, async () => {
      const { done, rows, before, after } = await run(change!);
      expect(done.outcome).toBe('failed');
      if (done.outcome === 'failed')
        expect(done.error).toMatchObject({ code: 'TRANSACTION_MISUSE', misuse: 'session-state' });
      expect(rows).toBe(0);
      expect(after).toEqual(before);
    });
  }
});

describe("the work's transaction-local settings hold through its own COMMIT (issue 39)", () => {
  let h: PgHarness;
  const role = `tx_tenant_${process.pid}`;
  beforeEach(async () => {
    h = await pgHarness('pg_tx_commit_settings', { movableClock: false });
    const s = h.db.schema;
    await h.db.pool.query(`
      create table ledger (key text not null);
      create table committed_with (key text, uid text, sync text, tz text, who text);
      create function record_commit() returns trigger language plpgsql as $$ begin
        insert into "${s}".committed_with values (new.key,
          coalesce(current_setting('app.uid', true), ''), current_setting('synchronous_commit'),
          current_setting('TimeZone'), current_user);
        return null; end $$;
      create constraint trigger record_commit after insert on ledger
        deferrable initially deferred for each row execute function record_commit();
      drop role if exists ${role};
      create role ${role};
      grant usage on schema "${s}" to ${role};
      grant insert on ledger, committed_with to ${role};
    `);
  });
  afterEach(async () => {
    await h.close();
    await h.db.pool.query(`drop role if exists ${role}`).catch(() => {});
  });

  const WORK = (key: string, sync: string) =>
    `set local app.uid = 'alice'; set local synchronous_commit = ${sync}; set local timezone = 'Asia/Tokyo'; set local role ${role}; insert into "${h.db.schema}".ledger values ('${key}')`;
  const seenAtCommit = async (key: string) =>
    (await h.db.pool.query('select uid, sync, tz, who from committed_with where key = $1', [key]))
      .rows;

  it('a deferred trigger sees the same settings and role as after a plain transaction', async () => {
    const plain = await h.db.pool.connect();
    try {
      await plain.query('begin');
      await plain.query(WORK('plain', 'remote_apply'));
      await plain.query('commit');
    } finally {
      plain.release(true);
    }
    const store = new PgStore({ pool: h.db.pool, schema: h.db.schema });
    const done = await new Runner(store, { ttlMs: TTL }).executeInTransaction<pg.PoolClient>(
      { key: 'effect', resource: 'r-commit' },
      async ({ tx }) => {
        await tx.query(WORK('effect', 'remote_apply'));
        return { payload: bytes('ok') };
      },
    );
    expect(done.outcome).toBe('applied');
    const expected = [{ uid: 'alice', sync: 'remote_apply', tz: 'Asia/Tokyo', who: role }];
    expect(await seenAtCommit('plain')).toEqual(expected);
    expect(await seenAtCommit('effect')).toEqual(expected);
    expect((await store.inspect('effect'))?.state).toBe('done');
  });

  it("a synchronous_commit the work lowered is raised to the connection's for the commit that records the key", async () => {
    const store = new PgStore({ pool: h.db.pool, schema: h.db.schema });
    const own = (await h.db.pool.query(`select current_setting('synchronous_commit') as s`)).rows[0]
      .s;
    const done = await new Runner(store, { ttlMs: TTL }).executeInTransaction<pg.PoolClient>(
      { key: 'lowered', resource: 'r-lowered' },
      async ({ tx }) => {
        await tx.query(WORK('lowered', 'off'));
        return { payload: bytes('ok') };
      },
    );
    expect(done.outcome).toBe('applied');
    expect(await seenAtCommit('lowered')).toEqual([
      { uid: 'alice', sync: own, tz: 'Asia/Tokyo', who: role },
    ]);
  });
});
