/**
 * The CLI tells a configuration mistake (exit 2, with what to fix) from an outage (exit 3), and
 * names where it connected (host, database, user; never the password). pg_hba.conf trusts
 * 127.0.0.1 here, so a wrong password (28P01) cannot be provoked (test/unit/connection-refusal.test.ts
 * has it); a role that does not exist (28000), a database that does not exist (3D000) and a role
 * without privileges (42501) can.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/store/postgres/index.js';
import { runCli } from '../support/cli.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';

const PASSWORD = 'pw-not-to-be-shown';
const role = `sideeffect_cli_nopriv_${Date.now().toString(36)}`;
const { hostname, port, pathname } = new URL(databaseUrl());
const testDatabase = pathname.slice(1);
let db: FreshSchema;
let admin: pg.Pool;

beforeAll(async () => {
  db = await freshSchema('cli_conn');
  admin = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
  await migrate(admin, { schema: db.schema });
  await admin.query(`create role ${role} login password '${PASSWORD}'`);
});

afterAll(async () => {
  await admin?.query(`drop role if exists ${role}`);
  await admin?.end();
  await db?.drop();
});

function urlAs(user: string, database = testDatabase, at = `${hostname}:${port || 5432}`): string {
  return `postgres://${user}:${PASSWORD}@${at}/${database}`;
}

async function cli(args: string[], url: string) {
  const run = await runCli([...args, '-o', 'json'], {
    DATABASE_URL: url,
    SIDEEFFECT_SCHEMA: db.schema,
  });
  const error = (JSON.parse(run.stdout || '{}') as { error?: { code: string; message: string } })
    .error;
  expect(run.stdout + run.stderr).not.toContain(PASSWORD);
  return { ...run, error };
}

const target = (database: string, user: string) =>
  `Postgres at ${hostname}:${port || 5432}, database "${database}", user "${user}"`;

describe('Postgres refuses the CLI: exit 2, naming host, database and user', () => {
  it.each([
    ['list', ['list']],
    ['migrate --status', ['migrate', '--status']],
  ])('a user that does not exist (28000): %s', async (_, args) => {
    const run = await cli(args, urlAs('no_such_user_h7'));
    expect(run.code, run.stderr).toBe(2);
    expect(run.error?.code).toBe('STORE_MISCONFIGURED');
    expect(run.error?.message).toContain(target(testDatabase, 'no_such_user_h7'));
    expect(run.error?.message).toMatch(/SQLSTATE 28000.*check the user name/);
  });

  it('a database that does not exist (3D000)', async () => {
    const run = await cli(['list'], urlAs('postgres', 'no_such_database_h7'));
    expect(run.code, run.stderr).toBe(2);
    expect(run.error?.message).toContain(target('no_such_database_h7', 'postgres'));
    expect(run.error?.message).toMatch(/SQLSTATE 3D000.*check the database name/);
  });

  it.each([
    [['show', 'some-key'], 'readonly'],
    [
      ['resolve', 'some-key', '--fence', '1', '--not-applied', '--reason', 'x', '--store-only'],
      'operator',
    ],
    [['withdraw', 'some-key', '--verdict', '1', '--reason', 'x'], 'operator'],
  ])(
    'a user without privileges on the schema (42501): %s advises --kind %s',
    async (args, kind) => {
      const run = await cli(args, urlAs(role));
      expect(run.code, run.stderr).toBe(2);
      expect(run.error?.message).toContain(target(testDatabase, role));
      expect(run.error?.message).toMatch(
        new RegExp(`SQLSTATE 42501.*--print-grants ROLE --kind ${kind}`),
      );
    },
  );

  it('migrate as a user without privileges (42501)', async () => {
    const run = await cli(['migrate'], urlAs(role));
    expect(run.code, run.stderr).toBe(2);
    expect(run.error?.message).toMatch(/SQLSTATE 42501/);
  });
});

describe('the CLI on a database that does not answer', () => {
  it('exit 3, STORE_UNAVAILABLE, naming where it tried', async () => {
    const run = await cli(['list'], urlAs('postgres', testDatabase, '127.0.0.1:1'));
    expect(run.code, run.stderr).toBe(3);
    expect(run.error?.code).toBe('STORE_UNAVAILABLE');
    expect(run.error?.message).toContain(target(testDatabase, 'postgres').replace(/:\d+,/, ':1,'));
  });
});

describe('configuration the CLI cannot use: exit 2', () => {
  it('a --connection that is not a Postgres URL', async () => {
    const run = await cli(['list', '--connection', 'not-a-url'], databaseUrl());
    expect(run.code, run.stderr).toBe(2);
    expect(run.error).toMatchObject({ code: 'USAGE' });
    expect(run.error?.message).toMatch(/--connection is not a Postgres URL/);
  });

  it('an unknown --profile', async () => {
    const run = await cli(
      [
        'resolve',
        'some-key',
        '--fence',
        '1',
        '--not-applied',
        '--reason',
        'r',
        '--profile',
        'no-such-profile',
      ],
      databaseUrl(),
    );
    expect(run.code, run.stderr).toBe(2);
    expect(run.error).toMatchObject({ code: 'USAGE' });
    expect(run.error?.message).toMatch(/no-such-profile/);
  });
});
