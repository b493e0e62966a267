/**
 * Database roles (issue 24, docs/database-roles.md): the page's SQL, run as written (with names of
 * this run), gives an owner that migrates without CREATE on the database, a runtime role that
 * runs the store and a no-op migrate() but no DDL, an operator whose CLI lists, shows, resolves
 * and reads stats but writes no table, and a read-only role that reads and cannot resolve. The
 * store conformance suite as a runtime role with exactly the printed grants is
 * postgres-roles-conformance.test.ts (a cell of the conformance matrix).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Runner } from '../../src/core/index.js';
import { payloadDigest } from '../../src/store/digest.js';
import {
  grantsScript,
  migrate,
  PgFencedSink,
  PgStore,
  storeStats,
} from '../../src/store/postgres/index.js';
import { listMigrations, migrateFiles } from '../../src/store/postgres/migrate.js';
import { bytes } from '../support/bytes.js';
import { runCli } from '../support/cli.js';
import { databaseUrl, freshSchema } from '../support/postgres.js';
import { grantedRole } from '../support/roles.js';
import { REPO_ROOT } from '../support/temporal.js';
import { SQL_0_1_0 } from './fixtures/release-0.1.0.js';

const tag = randomBytes(4).toString('hex');
const WEEK = 7 * 24 * 60 * 60 * 1000;
const schema = `t_roles_${tag}`;
const KINDS = ['owner', 'runtime', 'operator', 'readonly'] as const;
const role = (kind: (typeof KINDS)[number]) => `sideeffect_${kind}_${tag}`;

/** The page's SQL blocks, with this run's role and schema names. */
function pageSql(): string[] {
  const page = readFileSync(path.join(REPO_ROOT, 'docs/database-roles.md'), 'utf8');
  return [...page.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) =>
    m[1]!
      .replace(/\bsideeffect_(owner|runtime|operator|readonly)\b/g, (name) => `${name}_${tag}`)
      .replaceAll('"sideeffect"', `"${schema}"`)
      .replace(/create schema sideeffect /, `create schema ${schema} `),
  );
}

function urlAs(kind: (typeof KINDS)[number]): string {
  const url = new URL(databaseUrl());
  url.username = role(kind);
  return url.toString();
}

function poolAs(kind: (typeof KINDS)[number]): pg.Pool {
  const pool = new pg.Pool({ connectionString: urlAs(kind), max: 2 });
  pool.on('error', () => {});
  return pool;
}

const admin = new pg.Pool({ connectionString: databaseUrl(), max: 2 });
let blocks: string[];

beforeAll(async () => {
  blocks = pageSql();
  // Block 1, as a superuser: the roles and the schema.
  await admin.query(blocks[0]!);
});

afterAll(async () => {
  await admin.query(`drop schema if exists ${schema} cascade`);
  for (const kind of KINDS) {
    await admin.query(`drop owned by ${role(kind)}`).catch(() => {});
    await admin.query(`drop role if exists ${role(kind)}`);
  }
  await admin.end();
});

describe('docs/database-roles.md, run as written', () => {
  it('prints exactly what grantsScript() and `migrate --print-grants` give', async () => {
    expect(blocks).toHaveLength(4);
    const kinds = ['runtime', 'operator', 'readonly'] as const;
    kinds.forEach((kind, i) => {
      const printed = grantsScript({ schema: 'sideeffect', role: `sideeffect_${kind}`, kind });
      expect(pageSql()[i + 1]).toBe(
        printed
          .replaceAll(`sideeffect_${kind}`, role(kind))
          .replaceAll('"sideeffect"', `"${schema}"`),
      );
    });
    const cli = await runCli(
      ['migrate', '--print-grants', 'sideeffect_runtime', '--kind', 'runtime'],
      {
        SIDEEFFECT_SCHEMA: 'sideeffect',
      },
    );
    expect(cli.stdout).toBe(
      `${grantsScript({ schema: 'sideeffect', role: 'sideeffect_runtime', kind: 'runtime' })}\n`,
    );
  });

  it('owner migrates without CREATE on the database; the grants apply; each role can what it may and nothing else', async () => {
    const { rows } = await admin.query(
      `select has_database_privilege($1, current_database(), 'CREATE') as create`,
      [role('owner')],
    );
    expect(rows[0].create).toBe(false);
    const owner = poolAs('owner');
    const runtime = poolAs('runtime');
    const operator = poolAs('operator');
    const readonly = poolAs('readonly');
    try {
      expect((await migrate(owner, { schema })).length).toBeGreaterThan(0);
      for (const block of blocks.slice(1)) await owner.query(block);

      // Runtime: migrate() with nothing to apply, the store and the sink, no DDL.
      expect(await migrate(runtime, { schema })).toEqual([]);
      const store = new PgStore({ pool: runtime, schema });
      const sink = new PgFencedSink({ pool: runtime, schema });
      const runner = new Runner(store, { ttlMs: 10_000 });
      const paid = await runner.execute({ key: 'paid', resource: 'card' }, async ({ lease }) => {
        await sink.writeFenced('card', lease.fence, async () => {});
        return { payload: bytes('ok') };
      });
      expect(paid.outcome).toBe('applied');
      const lost = await runner.execute({ key: 'lost', resource: 'card' }, async () => {
        throw new Error('response lost');
      });
      expect(lost.outcome).toBe('uncertain');
      expect(
        (
          await store.executeInTransaction({ key: 'tx', resource: 'ledger' }, 10_000, async () => ({
            payload: bytes('in tx'),
          }))
        ).outcome,
      ).toBe('applied');
      expect(await store.claimReconciles({ limit: 5, restartAfterMs: 1_000 })).toHaveLength(1);
      expect(await store.leadSweep(store)).toBe(true);
      await store.sweep();
      await store.resignSweep(store);
      // A forced purge below the floor needs the owner's role; at the floor the runtime purges.
      await expect(store.purge({ olderThanMs: 60_000, force: true })).rejects.toMatchObject({
        code: 'PURGE_BELOW_FLOOR',
        refusedBy: 'owner',
      });
      expect(await store.purge({ olderThanMs: WEEK })).toBe(0);
      // Breakers (0021): the runtime role counts outcomes and admits attempts through functions.
      const bank = {
        group: 'bank',
        threshold: 1,
        windowMs: 60_000,
        coolDownMs: 60_000,
        maxCoolDownMs: 60_000,
      };
      await store.recordOutcome(bank, { key: 'lost', fence: 2, outcome: 'uncertain' });
      expect(await store.admitAttempt(bank, 'next')).toMatchObject({ admitted: false });
      for (const ddl of [
        `create table ${schema}.x (id int)`,
        `alter table ${schema}.keys add column x int`,
        `drop function ${schema}.store_now()`,
        `create or replace function ${schema}.store_now() returns timestamptz language sql as $$ select now() $$`,
      ]) {
        await expect(runtime.query(ddl), ddl).rejects.toMatchObject({ code: '42501' });
      }

      // Operator: the CLI reads and resolves; no table write of its own.
      const env = { DATABASE_URL: urlAs('operator'), SIDEEFFECT_SCHEMA: schema };
      for (const args of [['list'], ['show', 'lost'], ['stats'], ['migrate', '--status']]) {
        const run = await runCli(args, env);
        expect({ args, code: run.code, stderr: run.stderr }).toMatchObject({ code: 0 });
      }
      const resolved = await runCli(
        ['resolve', '--any-attempt', 'lost', '--not-applied', '--reason', 'not in the ledger'],
        { ...env, TEMPORAL_ADDRESS: '127.0.0.1:1' },
      );
      // No Temporal: the verdict is held in the store for a worker's check (through
      // hold_verdict), and exit 3 says no workflow was told.
      expect(resolved).toMatchObject({ code: 3 });
      expect(resolved.stderr).toContain('recording the verdict in the store as a pending verdict');
      expect((await store.inspect('lost'))?.state).toBe('uncertain');
      expect((await store.pendingVerdicts('lost')).map((v) => v.state)).toEqual(['pending']);
      // A key no worker serves: decided in the store at once, through resolve_uncertain.
      const direct = await runCli(
        [
          'resolve',
          'lost',
          '--any-attempt',
          '--store-only',
          '--not-applied',
          '--reason',
          'not in the ledger',
        ],
        env,
      );
      expect(direct, direct.stderr).toMatchObject({ code: 0 });
      expect((await store.inspect('lost'))?.state).toBe('free');
      // Breakers (0021): the operator lists them and closes one, through the functions only.
      const listed = await runCli(['breakers', '-o', 'json'], env);
      expect(listed, listed.stderr).toMatchObject({ code: 0 });
      expect(JSON.parse(listed.stdout)).toMatchObject([{ group: 'bank', state: 'open' }]);
      const closed = await runCli(
        ['breaker', 'close', 'bank', '--reason', 'bank recovered', '--by', 'alice'],
        env,
      );
      expect(closed, closed.stderr).toMatchObject({ code: 0 });
      expect((await store.breakerEvents('bank')).at(-1)).toMatchObject({
        from: 'open',
        to: 'closed',
        by: 'alice',
        identity: expect.stringContaining('sideeffect-cli:'),
      });
      for (const write of [
        `update ${schema}.keys set state = 'done' where key = 'lost'`,
        `insert into ${schema}.events (key, from_state, to_state, fence, reason, actor, at) values ('lost', 'free', 'done', 1, 'x', 'x', now())`,
        `delete from ${schema}.keys`,
        `update ${schema}.resources set fence = 0`,
      ]) {
        await expect(operator.query(write), write).rejects.toMatchObject({ code: '42501' });
      }

      // Read-only: reads everything, writes nothing, cannot resolve.
      expect((await storeStats(readonly, { schema })).keys.done).toBe(2);
      expect((await new PgStore({ pool: readonly, schema }).list()).length).toBe(3);
      for (const write of [
        `select * from ${schema}.resolve_uncertain('lost', false, null, 'x', 'x', null)`,
        `update ${schema}.keys set reason = 'x'`,
        `insert into ${schema}.sink_fences values ('r', 1)`,
      ]) {
        await expect(readonly.query(write), write).rejects.toMatchObject({ code: '42501' });
      }
    } finally {
      await Promise.all([owner.end(), runtime.end(), operator.end(), readonly.end()]);
    }
  });

  it('every forbidden act is refused, as the runtime, the operator and the read-only role', async () => {
    const runtime = poolAs('runtime');
    const operator = poolAs('operator');
    const readonly = poolAs('readonly');
    const owner = poolAs('owner');
    try {
      const store = new PgStore({ pool: runtime, schema });
      const sink = new PgFencedSink({ pool: runtime, schema });
      const runner = new Runner(store, { ttlMs: 10_000 });
      const paid = await runner.execute(
        { key: 'forbidden', resource: 'vault' },
        async ({ lease }) => {
          await sink.writeFenced('vault', lease.fence, async () => {});
          return { payload: bytes('ok') };
        },
      );
      if (paid.outcome !== 'applied') throw new Error(paid.outcome);
      const snapshot = async () =>
        (
          await owner.query(
            `select (select fence from ${schema}.resources where resource = 'vault') as fence,
                    (select fence from ${schema}.sink_fences where resource = 'vault') as mark,
                    (select state from ${schema}.keys where key = 'forbidden') as state,
                    (select count(*) from ${schema}.events) as events,
                    (select count(*) from ${schema}.keys) as keys`,
          )
        ).rows[0];
      const unchanged = await snapshot();
      const s = schema;
      const acts = [
        // a verdict without its event
        `update ${s}.keys set state = 'free', reason = 'forged' where key = 'forbidden'`,
        `insert into ${s}.keys (key, resource, digest, state, fence, retry_safety, updated_at) values ('forged', 'vault', '', 'done', 1, 'unknown', now())`,
        // forging or deleting events
        `insert into ${s}.events (key, from_state, to_state, fence, reason, actor, at) values ('forbidden', 'uncertain', 'done', 1, 'x', 'x', now())`,
        `update ${s}.events set reason = 'rewritten'`,
        `delete from ${s}.events`,
        // raising a fence, lowering a sink mark
        `update ${s}.resources set fence = fence + 100`,
        `insert into ${s}.resources (resource, fence) values ('planted', 99)`,
        `update ${s}.sink_fences set fence = 0`,
        `delete from ${s}.sink_fences`,
        // purging in SQL, below the floor or not
        `delete from ${s}.keys`,
        `truncate ${s}.keys cascade`,
        `select ${s}.purge_batch(0, 1000)`,
        `select ${s}.purge(0)`,
        // the helpers that move keys unchecked
        `select ${s}.move_key('forbidden', 1, 'free', null, 'x', 'x', now())`,
        `select ${s}.conclude('forbidden', 'x', now())`,
        `select ${s}.tx_complete('forged', 'vault', '\\x00'::bytea, 1, 'unknown', null)`,
        `select ${s}.secure_store_functions()`,
        `select ${s}.breaker_move('bank', 'closed', 'forged', 'x', null, now())`,
        // a breaker moved, or its history rewritten, without its functions
        `insert into ${s}.breakers (grp, since, reason, actor) values ('bank', now(), 'x', 'x')`,
        `update ${s}.breakers set state = 'closed'`,
        `delete from ${s}.breaker_events`,
        `insert into ${s}.breaker_outcomes (grp, key, fence, at) values ('bank', 'k', 1, now())`,
        // the store's own functions, used to forge
        `select ${s}.raise_sink_mark('vault', 1000, false)`,
        `select * from ${s}.tx_record('forged', 'vault', '\\x00'::bytea, 1, 'unknown', null, txid_current())`,
        // DDL
        `alter table ${s}.keys add column x int`,
        `create or replace function ${s}.store_now() returns timestamptz language sql as $$ select now() $$`,
      ];
      for (const [kind, pool] of [
        ['runtime', runtime],
        ['operator', operator],
        ['readonly', readonly],
      ] as const) {
        for (const act of acts) {
          const refused = await pool.query(act).then(
            () => undefined,
            (error: { code?: string }) => error.code,
          );
          // 42501: no privilege; SE13x: the store's own function refuses it.
          expect({ kind, act, refused }).toEqual({
            kind,
            act,
            refused: expect.stringMatching(/^(42501|SE13[1-3])$/),
          });
        }
      }
      // The store's functions themselves are the runtime role's only (and the operator's verdicts).
      for (const pool of [operator, readonly]) {
        await expect(
          pool.query(`select * from ${s}.acquire_fresh('x', 'vault', '', 'unknown', 1000, false)`),
        ).rejects.toMatchObject({ code: '42501' });
        await expect(pool.query(`select ${s}.tx_burn_fence('vault', 1000)`)).rejects.toMatchObject({
          code: '42501',
        });
      }
      // What the runtime role may call cannot do these either: a fence burnt only one step past
      // a free resource's, a sink mark never lowered.
      await runtime.query(`select ${s}.tx_burn_fence('vault', 1000)`);
      expect(
        (await runtime.query(`select ${s}.raise_sink_mark('vault', 0, false) as m`)).rows[0].m,
      ).toBe(null);
      expect(await snapshot()).toEqual(unchanged);
    } finally {
      await Promise.all([owner.end(), runtime.end(), operator.end(), readonly.end()]);
    }
  });

  it('every function the runtime role can call runs as its owner with a pinned search_path; it writes no table itself', async () => {
    const { rows } = await admin.query(
      `select p.oid::regprocedure::text as fn, p.prosecdef as definer,
              exists (select from unnest(p.proconfig) c where c like 'search\\_path=%') as pinned,
              has_function_privilege('public', p.oid, 'EXECUTE') as public
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = $1 and has_function_privilege($2, p.oid, 'EXECUTE')`,
      [schema, role('runtime')],
    );
    expect(rows.length).toBeGreaterThan(10);
    for (const row of rows) {
      // store_now() and epoch_ms() read no table and stay inlinable; public may run them.
      if (/(^|\.)(store_now|epoch_ms)\(/.test(row.fn)) continue;
      expect(row).toEqual({ fn: row.fn, definer: true, pinned: true, public: false });
    }
    const writes = await admin.query(
      `select c.relname, p.privilege from pg_class c
         join pg_namespace n on n.oid = c.relnamespace,
         unnest(array['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) as p(privilege)
        where n.nspname = $1 and c.relkind = 'r' and has_table_privilege($2, c.oid, p.privilege)`,
      [schema, role('runtime')],
    );
    expect(writes.rows).toEqual([]);
  });
});

describe('a later migration that redefines a function (issue 31)', () => {
  it('is made security definer with a pinned search_path again by migrate(), and runtime roles keep EXECUTE', async () => {
    // A schema of its own: the later migration changes its catalog (pgHarness's are shared).
    const db = await freshSchema('pg_roles_later');
    try {
      await migrate(db.pool, { schema: db.schema, log: () => {} });
      const runtime = await grantedRole(db, 'runtime');
      try {
        const files = listMigrations();
        const m0013 = files.find((f) => f.version === 13)!;
        const burn = /create function tx_burn_fence[\s\S]*?\n\$\$;/.exec(m0013.sql)![0];
        const later = {
          version: 9994,
          name: '9994_later.sql',
          sql: `-- sideeffect: backward-compatible
${burn.replace('create function', 'create or replace function').replace('  set search_path from current\n', '')}
create function later_entry() returns bigint language sql as $$ select count(*) from keys $$;
`,
          sha256: 'later',
          backwardCompatible: true,
        };
        expect(await migrateFiles(db.pool, { schema: db.schema }, [...files, later])).toEqual([
          '9994_later.sql',
        ]);
        const { rows } = await db.pool.query(
          `select p.proname, p.prosecdef as definer,
                  exists (select from unnest(p.proconfig) c where c like 'search\\_path=%') as pinned,
                  has_function_privilege('public', p.oid, 'EXECUTE') as public,
                  has_function_privilege($2, p.oid, 'EXECUTE') as runtime
             from pg_proc p join pg_namespace n on n.oid = p.pronamespace
            where n.nspname = $1 and p.proname in ('tx_burn_fence', 'later_entry') order by 1`,
          [db.schema, runtime.role],
        );
        expect(rows).toEqual([
          { proname: 'later_entry', definer: true, pinned: true, public: false, runtime: true },
          { proname: 'tx_burn_fence', definer: true, pinned: true, public: false, runtime: true },
        ]);
      } finally {
        await runtime.drop();
      }
    } finally {
      await db.drop();
    }
  });
});

describe('rolling out the runtime grants (issue 31)', () => {
  it('workers on the old grants keep working through 0013; the new grants take the table writes away', async () => {
    // A schema of its own: it is built as the previous build left it, then migrated.
    const db = await freshSchema('pg_roles_rollout');
    const r = `sideeffect_old_runtime_${tag}`;
    const s = `"${db.schema}"`;
    const url = new URL(databaseUrl());
    url.username = r;
    const pool = new pg.Pool({ connectionString: url.toString(), max: 2 });
    pool.on('error', () => {});
    try {
      // A schema as the previous build left it, and a runtime role with that build's grants.
      const files = listMigrations();
      await migrateFiles(
        db.pool,
        { schema: db.schema, log: () => {} },
        files.filter((f) => f.version < 13),
      );
      await db.pool.query(`create role ${r} login`);
      await db.pool.query(`grant usage on schema ${s} to ${r};
        grant select, insert, update, delete on table ${s}.keys to ${r};
        grant select, insert, delete on table ${s}.events to ${r};
        grant select, insert, update on table ${s}.resources, ${s}.sink_fences, ${s}.reconcile_starts to ${r};
        grant select on table ${s}.migrations, ${s}.migration_history to ${r};
        grant execute on all functions in schema ${s} to ${r};`);
      // The sink's own statement before 0013 (0.1.0's), and 0.1.0's store statements.
      const oldSinkRaise = `insert into ${s}.sink_fences as sink (resource, fence) values ($1, $2)
        on conflict (resource) do update set fence = excluded.fence
        where sink.fence <= excluded.fence returning fence`;
      const digest = payloadDigest(new Uint8Array());
      let n = 0;
      const oldWorker = async () => {
        const key = `old-${n++}`;
        const grant = (
          await pool.query(SQL_0_1_0.acquire(s), [key, key, digest, 'unknown', 10_000, false])
        ).rows[0];
        expect(grant.o_outcome).toBe('applied');
        expect((await pool.query(oldSinkRaise, [key, grant.o_fence])).rowCount).toBe(1);
        expect(
          (await pool.query(SQL_0_1_0.complete(s), [key, key, grant.o_fence, null])).rows[0],
        ).toMatchObject({ o_outcome: 'completed' });
      };
      const newWorker = async () => {
        const store = new PgStore({ pool, schema: db.schema });
        const sink = new PgFencedSink({ pool, schema: db.schema });
        const done = await new Runner(store, { ttlMs: 10_000 }).execute(
          { key: `new-${n++}`, resource: 'rollout' },
          async ({ lease }) => {
            await sink.writeFenced('rollout', lease.fence, async () => {});
            return { payload: bytes('ok') };
          },
        );
        expect(done.outcome).toBe('applied');
      };
      await oldWorker();
      // 1. Migrate (this version's workers need 0013's functions): both keep working on the old grants.
      expect(await migrate(db.pool, { schema: db.schema, log: () => {} })).toContain(
        '0013_runtime_role_functions.sql',
      );
      await oldWorker();
      await newWorker();
      // 3. Every worker on this version: the new grants take the writes away.
      await db.pool.query(grantsScript({ schema: db.schema, role: r, kind: 'runtime' }));
      await newWorker();
      await expect(pool.query(oldSinkRaise, ['rollout', 1])).rejects.toMatchObject({
        code: '42501',
      });
      await expect(pool.query(`update ${s}.keys set state = 'free'`)).rejects.toMatchObject({
        code: '42501',
      });
    } finally {
      await pool.end();
      await db.drop();
      await admin.query(`drop owned by ${r}`).catch(() => {});
      await admin.query(`drop role if exists ${r}`);
    }
  });
});

describe('what the runtime role may call raises no fence and no sink mark the store did not issue (issue 39)', () => {
  it('tx_burn_fence burns only a fence a rolled-back grant had, once; raise_sink_mark stops at the issued fence whatever p_issued_here says', async () => {
    const db = await freshSchema('pg_issued_only');
    await migrate(db.pool, { schema: db.schema, log: () => {} });
    const runtime = await grantedRole(db, 'runtime');
    const pool = new pg.Pool({ connectionString: runtime.url, max: 2 });
    pool.on('error', () => {});
    const s = `"${db.schema}"`;
    try {
      const store = new PgStore({ pool, schema: db.schema });
      const sink = new PgFencedSink({ pool, schema: db.schema });
      const runner = new Runner(store, { ttlMs: 10_000 });
      const paid = (key: string) =>
        runner.execute({ key, resource: 'vault' }, async ({ lease }) => {
          await sink.writeFenced('vault', lease.fence, async () => {});
          return { payload: bytes('ok') };
        });
      expect((await paid('first')).outcome).toBe('applied');
      expect((await paid('second')).outcome).toBe('applied');
      const marks = async () =>
        (
          await db.pool.query(
            `select (select fence::int from ${s}.resources where resource = 'vault') as fence,
                    (select fence::int from ${s}.sink_fences where resource = 'vault') as mark`,
          )
        ).rows[0];
      expect(await marks()).toEqual({ fence: 2, mark: 2 });
      // 200 burns, each one step past the fence the last one would have left: no grant was rolled back.
      for (let fence = 3; fence < 203; fence++) {
        await pool.query(`select ${s}.tx_burn_fence('vault', $1)`, [fence]);
      }
      expect(await marks()).toEqual({ fence: 2, mark: 2 });
      // Nor on a resource never seen past fence 1, however often.
      for (let fence = 1; fence < 20; fence++) {
        await pool.query(`select ${s}.tx_burn_fence('never-granted', $1)`, [fence]);
      }
      expect(
        (
          await db.pool.query(
            `select fence::int from ${s}.resources where resource = 'never-granted'`,
          )
        ).rows,
      ).toEqual([{ fence: 1 }]);
      // A sink mark above the issued fence, as if the data lived in another database: refused.
      for (const [fence, atLeast] of [
        [1e12, true],
        [1e12, false],
        [4, true],
        [3, false],
      ] as const) {
        await expect(
          pool.query(`select ${s}.raise_sink_mark('vault', $1, $2, false)`, [fence, atLeast]),
        ).rejects.toMatchObject({ code: 'SE131' });
      }
      await expect(
        pool.query(`select ${s}.raise_sink_mark('unseen', 1000000000000, true, false)`),
      ).rejects.toMatchObject({ code: 'SE131' });
      expect(await marks()).toEqual({ fence: 2, mark: 2 });
      // The next legitimate effect: applied, its sink write at fence 3 accepted.
      expect((await paid('third')).outcome).toBe('applied');
      expect(await marks()).toEqual({ fence: 3, mark: 3 });
      // A grant that really happened and was rolled back: its fence is burnt, once.
      const client = await pool.connect();
      try {
        await client.query('begin');
        const { rows } = await client.query(
          `select o_fence::int as fence from ${s}.tx_grant_fresh('rolled-back', 'vault')`,
        );
        expect(rows).toEqual([{ fence: 4 }]);
        await client.query('rollback');
      } finally {
        client.release();
      }
      expect(await marks()).toEqual({ fence: 3, mark: 3 });
      await pool.query(`select ${s}.tx_burn_fence('vault', 4)`);
      await pool.query(`select ${s}.tx_burn_fence('vault', 5)`);
      await pool.query(`select ${s}.tx_burn_fence('vault', 5)`);
      expect(await marks()).toEqual({ fence: 4, mark: 3 });
      expect((await paid('fourth')).outcome).toBe('applied');
      expect(await marks()).toEqual({ fence: 5, mark: 5 });
    } finally {
      await pool.end();
      await runtime.drop();
      await db.drop();
    }
  });
});
