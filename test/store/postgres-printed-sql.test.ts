/**
 * The printed scripts (`migrate --print-sql`, `--print-grants`; issue 31): a schema or role name
 * holding a newline, a quote, a backslash, `*` `/`, `;` or a dollar-quote tag stays a name when a
 * DBA runs the script, whatever `standard_conforming_strings` says, so nothing carried in it
 * executes; and the migration script needs no CREATE on the database where the schema exists.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grantsScript, migrate, migrationScript, PgStore } from '../../src/store/postgres/index.js';
import { databaseUrl } from '../support/postgres.js';

const tag = randomBytes(3).toString('hex');
const admin = new pg.Pool({ connectionString: databaseUrl(), max: 2 });
/** The table each hostile name tries to create: it must never exist. */
const pwned = (n: number) => `pwned_${tag}_${n}`;

/** Names that ended the comment or the literal they were printed in before issue 31. */
const HOSTILE = [
  `t_${tag}\n; create table public.${pwned(1)} (x int); --`,
  `t_${tag}\\'; create table public.${pwned(2)} (x int); --`,
  `t_${tag}$sideeffect$; create table public.${pwned(3)} (); --`,
  `t_${tag}*/\r; create table public.${pwned(4)} (); /*"'`,
];

async function nothingElseRan(): Promise<void> {
  const { rows } = await admin.query(
    `select relname from pg_catalog.pg_class where relname like $1`,
    [`pwned_${tag}%`],
  );
  expect(rows).toEqual([]);
}

afterAll(async () => {
  for (const schema of HOSTILE) {
    await admin.query(`drop schema if exists "${schema.replaceAll('"', '""')}" cascade`);
  }
  await admin.end();
});

describe('migrate --print-sql with a hostile schema name', () => {
  it.each(HOSTILE.map((schema, i) => [i + 1, schema] as const))(
    'name %i: the script makes that schema and nothing else, with standard_conforming_strings off too',
    async (_, schema) => {
      expect(Buffer.byteLength(schema)).toBeLessThanOrEqual(63);
      const client = await admin.connect();
      try {
        // A session as an old server or a careless DBA may have it: backslashes escape quotes.
        await client.query('set standard_conforming_strings = off');
        await client.query(migrationScript({ schema }));
      } finally {
        client.release(true);
      }
      await nothingElseRan();
      const { rows } = await admin.query(
        'select 1 from pg_catalog.pg_namespace where nspname = $1',
        [schema],
      );
      expect(rows).toHaveLength(1);
      // Recorded as migrate() records: nothing left to apply, and the store runs on it.
      const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
      try {
        expect(await migrate(pool, { schema })).toEqual([]);
        const store = new PgStore({ pool, schema });
        expect((await store.acquire({ key: 'k', resource: 'r' }, 10_000)).outcome).toBe('granted');
      } finally {
        await pool.end();
      }
    },
  );
});

describe('migrate --print-grants with a hostile role name', () => {
  const schema = `t_grants_${tag}`;
  const roles = [
    `r_${tag}\n; create table public.${pwned(11)} (x int); --`,
    `r_${tag}"; create table public.${pwned(12)} (); --`,
  ];
  beforeAll(async () => {
    await migrate(admin, { schema, log: () => {} });
    for (const role of roles) await admin.query(`create role "${role.replaceAll('"', '""')}"`);
  });
  afterAll(async () => {
    await admin.query(`drop schema if exists ${schema} cascade`);
    for (const role of roles) {
      const quoted = `"${role.replaceAll('"', '""')}"`;
      await admin.query(`drop owned by ${quoted}`).catch(() => {});
      await admin.query(`drop role if exists ${quoted}`);
    }
  });

  it.each(roles.map((role, i) => [i + 1, role] as const))(
    'role %i: the grants go to that role and nothing else runs',
    async (_, role) => {
      for (const kind of ['runtime', 'operator', 'readonly'] as const) {
        await admin.query(grantsScript({ schema, role, kind }));
      }
      await nothingElseRan();
      const { rows } = await admin.query(
        `select pg_catalog.has_table_privilege($1, $2, 'SELECT') as reads,
                pg_catalog.has_table_privilege($1, $2, 'UPDATE') as writes`,
        [role, `${schema}.keys`],
      );
      expect(rows[0]).toEqual({ reads: true, writes: false });
    },
  );
});

describe('migrate --print-sql where the schema exists', () => {
  it('runs as the schema owner without CREATE on the database', async () => {
    const owner = `o_${tag}`;
    const schema = `t_owned_${tag}`;
    await admin.query(`create role ${owner} login`);
    try {
      await admin.query(`create schema ${schema} authorization ${owner}`);
      const { rows } = await admin.query(
        `select pg_catalog.has_database_privilege($1, pg_catalog.current_database(), 'CREATE') as c`,
        [owner],
      );
      expect(rows[0].c).toBe(false);
      const url = new URL(databaseUrl());
      url.username = owner;
      const client = new pg.Client({ connectionString: url.toString() });
      await client.connect();
      try {
        await client.query(migrationScript({ schema }));
      } finally {
        await client.end();
      }
      const { rows: applied } = await admin.query(
        `select count(*)::int as n from ${schema}.migration_history`,
      );
      expect(applied[0].n).toBeGreaterThan(0);
    } finally {
      await admin.query(`drop schema if exists ${schema} cascade`);
      await admin.query(`drop owned by ${owner}`).catch(() => {});
      await admin.query(`drop role if exists ${owner}`);
    }
  });
});
