/**
 * migrate() with workers of earlier releases running (issue 39): from 0.1.0's schema under three
 * busy lanes of 0.1.0's own statements (named, as 0.1.0's PgStore sends them, and its
 * PgFencedSink's transaction), the upgrade deadlocked against them every time; now it takes the
 * locks it needs first, in one order, retries what a cycle costs it, says so, and no worker call
 * fails. And the locks migrate() derives from each migration cover every lock it takes.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { payloadDigest } from '../../src/store/digest.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { listMigrations, migrateFiles } from '../../src/store/postgres/migrate.js';
import { type LockMode, migrationLocks } from '../../src/store/postgres/migration-locks.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { SQL_0_1_0 } from './fixtures/release-0.1.0.js';
import { SQL_0_2_0 } from './fixtures/release-0.2.0.js';

let db: FreshSchema;
beforeAll(async () => {
  db = await freshSchema('pg_migrate_traffic');
});
afterAll(() => db?.drop());

const quoted = (schema: string) => `"${schema.replaceAll('"', '""')}"`;

const PG_MODES: Record<string, LockMode> = {
  ShareLock: 'share',
  ShareRowExclusiveLock: 'share row exclusive',
  ExclusiveLock: 'exclusive',
  AccessExclusiveLock: 'access exclusive',
};
const STRENGTH: LockMode[] = ['share', 'share row exclusive', 'exclusive', 'access exclusive'];

describe('the locks migrate() takes first', () => {
  it("cover every lock each migration takes on an existing table that stops a worker's statements", async () => {
    const schema = `${db.schema}_locks`;
    const files = listMigrations();
    const client = await db.pool.connect();
    try {
      await migrateFiles(db.pool, { schema, log: () => {} }, files.slice(0, 1));
      for (const [i, file] of files.entries()) {
        if (i === 0) continue;
        await client.query('begin');
        await client.query(`set local search_path to ${quoted(schema)}, pg_temp`);
        const { rows: tables } = await client.query<{ relname: string }>(
          `select relname from pg_class where relnamespace = $1::regnamespace and relkind = 'r'`,
          [quoted(schema)],
        );
        const existing = new Set(tables.map((t) => t.relname));
        await client.query(file.sql);
        const { rows: held } = await client.query<{ relname: string; mode: string }>(
          `select c.relname, l.mode from pg_locks l join pg_class c on c.oid = l.relation
            where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.granted
              and c.relnamespace = $1::regnamespace and c.relkind = 'r'
              and l.mode = any($2)`,
          [quoted(schema), Object.keys(PG_MODES)],
        );
        await client.query('rollback');
        const derived = new Map(
          migrationLocks([file.sql], existing).map(({ table, mode }) => [table, mode]),
        );
        for (const { relname, mode } of held) {
          if (!existing.has(relname)) continue;
          const need = PG_MODES[mode]!;
          const have = derived.get(relname);
          expect({
            file: file.name,
            table: relname,
            covered: have !== undefined && STRENGTH.indexOf(have) >= STRENGTH.indexOf(need),
          }).toEqual({ file: file.name, table: relname, covered: true });
        }
        await migrateFiles(db.pool, { schema, log: () => {} }, files.slice(0, i + 1));
      }
      // From 0.1.0's schema: keys, resources and events, keys first.
      expect(
        migrationLocks(
          files.slice(1).map((f) => f.sql),
          new Set(['keys', 'resources', 'events', 'sink_fences']),
        ),
      ).toEqual([
        { table: 'keys', mode: 'access exclusive' },
        { table: 'resources', mode: 'access exclusive' },
        { table: 'events', mode: 'access exclusive' },
      ]);
    } finally {
      client.release();
      await db.pool.query(`drop schema if exists ${quoted(schema)} cascade`);
    }
  });
});

/** 0.1.0's PgFencedSink raise, verbatim: its write transaction's first statement. */
const sinkRaise010 = (
  s: string,
) => `insert into ${s}.sink_fences as sink (resource, fence) values ($1, $2)
    on conflict (resource) do update set fence = excluded.fence
    where sink.fence <= excluded.fence
    returning fence`;

/** A statement of a lane, by its release's name for it: sent named, as both releases send them. */
type Query = (name: string, text: string, values: unknown[]) => Promise<pg.QueryResult>;

/**
 * One worker of an earlier release on a connection of its own, calling as fast as it can until
 * stopped (`call` is its n-th call: a few statements), every failure kept with the statement's
 * name.
 */
function lane(
  config: pg.ClientConfig,
  call: (q: Query, client: pg.Client, n: number) => Promise<void>,
) {
  const client = new pg.Client(config);
  const errors: string[] = [];
  let calls = 0;
  let stopped = false;
  let op = '';
  const q: Query = async (name, text, values) => {
    op = name;
    const result = await client.query({ name: `sideeffect_${name}`, text, values });
    calls += 1;
    return result;
  };
  const running = (async () => {
    await client.connect();
    for (let n = 0; !stopped; n++) {
      try {
        await call(q, client, n);
      } catch (error) {
        errors.push(`${op} ${(error as { code?: string }).code}: ${(error as Error).message}`);
        await client.query('rollback').catch(() => {});
      }
    }
    await client.end();
  })();
  return {
    get calls() {
      return calls;
    },
    errors,
    stop: async () => {
      stopped = true;
      await running;
    },
  };
}

const digest = payloadDigest(new Uint8Array());

/** 0.1.0's three kinds of call: renew and complete (and a sweep), a verdict, a fenced write. */
function lane010(config: pg.ClientConfig, s: string, which: number) {
  const q010 = (q: Query, name: keyof typeof SQL_0_1_0, values: unknown[]) =>
    q(`${name}_010`, SQL_0_1_0[name](s), values);
  return lane(config, async (q, client, n) => {
    const key = `l${which}-${n}`;
    const resource = `r${n % 3}`;
    const grant = (
      await q010(q, 'acquire', [key, resource, digest, 'unknown', 10_000, which !== 0])
    ).rows[0];
    if (grant.o_outcome !== 'applied') return;
    const fence = grant.o_fence;
    if (which === 0) {
      await q010(q, 'renew', [key, resource, fence, 10_000, true]);
      await q010(q, 'complete', [key, resource, fence, Buffer.from('ok')]);
      if (n % 10 === 0) await q010(q, 'sweep', []);
    } else if (which === 1) {
      await q010(q, 'markUncertain', [key, resource, fence, 'lost']);
      await q010(q, 'resolve', [key, false, null, 'checked', 'v0.1.0']);
    } else {
      await client.query('begin');
      await q('sinkRaise_010', sinkRaise010(s), [resource, fence]);
      await client.query(`insert into ${s}.ledger (key, fence) values ($1, $2)`, [key, fence]);
      await client.query('commit');
      await q010(q, 'complete', [key, resource, fence, Buffer.from('ok')]);
    }
  });
}

/** 0.2.0's three kinds of call: a fenced write, a plain effect, a transactional one. */
function lane020(config: pg.ClientConfig, s: string, which: number) {
  const q020 = (q: Query, name: keyof typeof SQL_0_2_0, values: unknown[]) =>
    q(`${name}_020`, SQL_0_2_0[name](s), values);
  return lane(config, async (q, client, n) => {
    const key = `m${which}-${n}`;
    const resource = `r${n % 3}`;
    if (which === 2) {
      await client.query('begin');
      const granted = (await q020(q, 'txAcquire', [key, resource, digest, '1000ms'])).rows[0];
      if (granted.o_fence === null) {
        await client.query('rollback');
        return;
      }
      await client.query(`insert into ${s}.ledger (key, fence) values ($1, $2)`, [
        key,
        granted.o_fence,
      ]);
      const recorded = (
        await q020(q, 'txComplete', [
          key,
          resource,
          digest,
          granted.o_fence,
          'unknown',
          Buffer.from('ok'),
          granted.o_xid,
        ])
      ).rows[0];
      expect(recorded.o_same).toBe(true);
      await client.query('commit');
      return;
    }
    const grant = (
      await q020(q, 'acquire', [key, resource, digest, 'unknown', 10_000, true, '1000ms'])
    ).rows[0].o_fresh;
    if (grant?.o_outcome !== 'applied') return;
    const fence = grant.o_fence;
    if (which === 0) {
      await client.query('begin');
      await q020(q, 'sinkRaise', [resource, fence, '1000ms', true]);
      await client.query(`insert into ${s}.ledger (key, fence) values ($1, $2)`, [key, fence]);
      await client.query('commit');
    }
    await q020(q, 'complete', [key, resource, fence, Buffer.from('ok'), '1000ms']);
  });
}

async function callsReach(lanes: Array<{ calls: number }>, at: number[]): Promise<void> {
  while (lanes.some((lane, i) => lane.calls < at[i]!)) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('upgrading under running workers of an earlier release (issue 39)', () => {
  it("from 0.1.0's schema under three busy lanes of 0.1.0 traffic: applied, no worker call fails, each retry logged", async () => {
    const schema = `${db.schema}_010`;
    const s = quoted(schema);
    const files = listMigrations();
    await migrateFiles(db.pool, { schema, log: () => {} }, files.slice(0, 1));
    await db.pool.query(`create table ${s}.ledger (key text primary key, fence bigint not null)`);
    const config = { ...db.config, options: undefined };
    const lanes = [0, 1, 2].map((lane) => lane010(config, s, lane));
    try {
      await callsReach(lanes, [20, 20, 20]);
      const lines: string[] = [];
      const applied = await migrate(db.pool, { schema, log: (line) => lines.push(line) });
      const at = lanes.map((lane) => lane.calls);
      await callsReach(
        lanes,
        at.map((n) => n + 20),
      );
      await Promise.all(lanes.map((lane) => lane.stop()));
      expect(applied).toEqual(files.slice(1).map((f) => f.name));
      // No call failed, but for one: 0.1.0's resolve running inside the function 0002 drops (its
      // signature changed) when the upgrade commits. Postgres takes no lock on a function it runs.
      expect(lanes.map((lane) => lane.errors)).toEqual([
        [],
        lanes[1]!.errors.length > 0
          ? [expect.stringMatching(/^resolve_010 XX000: cache lookup failed for function \d+$/)]
          : [],
        [],
      ]);
      expect(lines[0]).toMatch(
        /^sideeffect: migrating schema .*: 0002_store_hardening\.sql, .*; locking keys \(access exclusive\), resources \(access exclusive\), events \(access exclusive\) first$/,
      );
      for (const line of lines.slice(1, -1)) {
        expect(line).toMatch(
          /attempt \d+ of 31: a (deadlock|lock wait).*nothing applied, trying again in \d+ ms$/,
        );
      }
      if (lines.length > 1) expect(lines.at(-1)).toMatch(/applied \d+ migrations on attempt \d+$/);
      // And this version's store runs on it.
      const store = new PgStore({ pool: db.pool, schema });
      expect((await store.acquire({ key: 'after', resource: 'r0' }, 10_000)).outcome).toBe(
        'granted',
      );
    } finally {
      await Promise.all(lanes.map((lane) => lane.stop()));
      await db.pool.query(`drop schema if exists ${s} cascade`);
    }
  });

  it("from 0.2.0's schema under three busy lanes of 0.2.0 traffic (plain, fenced, transactional): applied, no worker call fails", async () => {
    const schema = `${db.schema}_020`;
    const s = quoted(schema);
    const files = listMigrations();
    const released = files.filter((f) => f.version <= 14);
    await migrateFiles(db.pool, { schema, log: () => {} }, released);
    await db.pool.query(`create table ${s}.ledger (key text primary key, fence bigint not null)`);
    const config = { ...db.config, options: undefined };
    const lanes = [0, 1, 2].map((which) => lane020(config, s, which));
    try {
      await callsReach(lanes, [20, 20, 20]);
      const lines: string[] = [];
      const applied = await migrate(db.pool, { schema, log: (line) => lines.push(line) });
      const at = lanes.map((lane) => lane.calls);
      await callsReach(
        lanes,
        at.map((n) => n + 20),
      );
      await Promise.all(lanes.map((lane) => lane.stop()));
      expect(applied).toEqual(files.filter((f) => f.version > 14).map((f) => f.name));
      expect(lanes.map((lane) => lane.errors)).toEqual([[], [], []]);
      expect(lines[0]).toMatch(/^sideeffect: migrating schema .*: 0015_batched_statements\.sql, /);
      const store = new PgStore({ pool: db.pool, schema });
      expect((await store.acquire({ key: 'after', resource: 'r0' }, 10_000)).outcome).toBe(
        'granted',
      );
    } finally {
      await Promise.all(lanes.map((lane) => lane.stop()));
      await db.pool.query(`drop schema if exists ${s} cascade`);
    }
  });
});
