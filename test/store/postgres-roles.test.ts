/**
 * Database roles (issue 24, docs/database-roles.md): the page's SQL, run as written (with names of
 * this run), gives an owner that migrates without CREATE on the database, a runtime role that
 * runs the store and a no-op migrate() but no DDL, an operator whose CLI lists, shows, resolves
 * and reads stats but writes no table, and a read-only role that reads and cannot resolve. And the
 * store conformance suite, whole, as a runtime role with exactly the printed grants.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Runner } from '../../src/core/index.js';
import {
  grantsScript,
  migrate,
  PgFencedSink,
  PgStore,
  storeStats,
} from '../../src/store/postgres/index.js';
import { describeStoreConformance } from '../conformance/store-conformance.js';
import { bytes } from '../support/bytes.js';
import { runCli } from '../support/cli.js';
import { databaseUrl } from '../support/postgres.js';
import { REPO_ROOT } from '../support/temporal.js';
import { pgHarness } from './pg-support/harness.js';

describeStoreConformance('PgStore as a runtime role with exactly its grants', () =>
  pgHarness('pg_runtime_role', { role: 'runtime' }),
);

const tag = randomBytes(4).toString('hex');
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
      expect(await store.purge({ olderThanMs: 60_000, force: true })).toBe(0);
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
      for (const args of [['list'], ['show', 'lost'], ['stats']]) {
        const run = await runCli(args, env);
        expect({ args, code: run.code, stderr: run.stderr }).toMatchObject({ code: 0 });
      }
      const resolved = await runCli(
        ['resolve', 'lost', '--not-applied', '--reason', 'not in the ledger'],
        { ...env, TEMPORAL_ADDRESS: '127.0.0.1:1' },
      );
      // No Temporal: the verdict is held in the store for a worker's check (through
      // hold_verdict), and exit 3 says no workflow was told.
      expect(resolved).toMatchObject({ code: 3 });
      expect(resolved.stderr).toContain('holding the verdict in the store');
      expect((await store.inspect('lost'))?.state).toBe('uncertain');
      expect((await store.heldVerdicts('lost')).map((v) => v.state)).toEqual(['pending']);
      // A key no worker serves: decided in the store at once, through resolve_uncertain.
      const direct = await runCli(
        ['resolve', 'lost', '--store-only', '--not-applied', '--reason', 'not in the ledger'],
        env,
      );
      expect(direct, direct.stderr).toMatchObject({ code: 0 });
      expect((await store.inspect('lost'))?.state).toBe('free');
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
});
