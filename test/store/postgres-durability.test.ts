/**
 * The durability check and `sideeffect doctor` on a real single primary (the shared Postgres, no
 * standby): it passes without configuration, `synchronous_commit = off` for the store's role is
 * refused (and flagged by the doctor), and the doctor reports a schema as this version's
 * migrations create it, then every hand-made change: an altered function, a grant to PUBLIC, a
 * worker's role missing a grant. With a real standby: test/faults/durability-replication.test.ts.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DurabilityAtRiskError } from '../../src/core/errors.js';
import { checkDurability, grantsScript, migrate } from '../../src/store/postgres/index.js';
import { runCli } from '../support/cli.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';

let db: FreshSchema;
let admin: pg.Pool;
const role = `dur_${randomBytes(4).toString('hex')}`;
const offRole = `dur_off_${randomBytes(4).toString('hex')}`;

/** The test database's URL as `user`, with extra connection parameters. */
function urlAs(user: string, params = ''): string {
  const url = new URL(databaseUrl());
  url.username = user;
  url.password = '';
  url.search = params;
  return url.toString();
}

const doctor = (args: string[] = [], url = databaseUrl()) =>
  runCli(['doctor', '--connection', url, '--schema', db.schema, ...args], {});

beforeAll(async () => {
  db = await freshSchema('durability');
  admin = new pg.Pool({ connectionString: databaseUrl(), max: 2 });
  await migrate(admin, { schema: db.schema, log: () => {} });
  await admin.query(`create role ${role} login; create role ${offRole} login`);
  await admin.query(`alter role ${offRole} set synchronous_commit = off`);
});

afterAll(async () => {
  await db?.drop();
  await admin?.query(`drop role if exists ${role}; drop role if exists ${offRole}`).catch(() => {});
  await admin?.end();
});

describe('checkDurability on a single primary', () => {
  it('passes without configuration, and says why', async () => {
    const report = await checkDurability(admin);
    expect(report.mode).toBe('single');
    expect(report.risks).toEqual([]);
    expect(report.facts).toMatchObject({
      inRecovery: false,
      standbys: [],
      synchronousCommit: 'on',
    });
    expect(report.notes.join(' ')).toMatch(/no failover can lose a commit/);
  });

  it("synchronous_commit = off for the store's role: DURABILITY_AT_RISK, under 'managed' too; 'accept-loss' returns it", async () => {
    const pool = new pg.Pool({ connectionString: urlAs(offRole), max: 1 });
    try {
      const refused = await checkDurability(pool).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(DurabilityAtRiskError);
      expect(refused).toMatchObject({ risks: [{ kind: 'commit-off' }] });
      expect((refused as Error).message).toMatch(
        /synchronous_commit is off.*a failover or crash then applies an effect twice|applies an effect twice.*synchronous_commit is off/,
      );
      expect((refused as Error).message).toContain(`user "${offRole}"`);
      expect(
        await checkDurability(pool, { durability: 'managed' }).catch((e: unknown) => e),
      ).toBeInstanceOf(DurabilityAtRiskError);
      const accepted = await checkDurability(pool, { durability: 'accept-loss' });
      expect(accepted.risks.map((r) => r.kind)).toEqual(['commit-off']);
      await expect(checkDurability(pool, { durability: 'off' as never })).rejects.toMatchObject({
        code: 'INVALID_ACTION',
      });
    } finally {
      await pool.end();
    }
  });
});

describe('sideeffect doctor', () => {
  it('a schema as migrated: nothing at risk, exit 0, text and JSON', async () => {
    const text = await doctor();
    expect(text.stderr).toBe('');
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/ok\s+replication\s+single primary/);
    expect(text.stdout).toMatch(/schema \S+ matches this version's migrations/);
    expect(text.stdout).toMatch(/nothing at risk/);
    const json = await doctor(['-o', 'json']);
    expect(json.code).toBe(0);
    const report = JSON.parse(json.stdout);
    expect(report).toMatchObject({
      schema: db.schema,
      atRisk: false,
      replication: { mode: 'single' },
    });
    expect(report.findings.map((f: { area: string }) => f.area)).toEqual(
      expect.arrayContaining(['replication', 'synchronous_commit', 'schema', 'roles', 'clock']),
    );
    expect(typeof report.clock.offsetMs).toBe('number');
  });

  it('synchronous_commit off in the connection: RISK with the fix, exit 1', async () => {
    const run = await doctor(
      ['-o', 'json'],
      urlAs('postgres', '?options=-c%20synchronous_commit%3Doff'),
    );
    expect(run.code).toBe(1);
    const report = JSON.parse(run.stdout);
    expect(report.atRisk).toBe(true);
    expect(report.findings).toContainEqual(
      expect.objectContaining({
        area: 'synchronous_commit',
        status: 'risk',
        next: expect.stringMatching(/set it on/),
      }),
    );
  });

  it('a function altered and a grant to PUBLIC by hand: the drift, each item named, exit 1', async () => {
    const s = db.schema;
    await admin.query(
      `create or replace function ${s}.store_now() returns timestamptz language sql as 'select now() + interval ''1 hour'''`,
    );
    await admin.query(`grant execute on function ${s}.conclude(text, text, timestamptz) to public`);
    await admin.query(`alter table ${s}.keys add column note text`);
    const run = await doctor(['-o', 'json']);
    expect(run.code).toBe(1);
    const schemaFinding = JSON.parse(run.stdout).findings.find(
      (f: { area: string }) => f.area === 'schema',
    );
    expect(schemaFinding.status).toBe('risk');
    expect(schemaFinding.items).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^lacks function store_now\(\) returns timestamp with time zone/),
        expect.stringMatching(/^has function store_now\(\)/),
        'has execute granted to PUBLIC on conclude(text,text,timestamp with time zone)',
        'has column keys.note text',
      ]),
    );
    expect(schemaFinding.items).toHaveLength(4);
    const text = await doctor();
    expect(text.stdout).toMatch(/RISK\s+schema\s+schema \S+ differs/);
    expect(text.stdout).toMatch(/next: the schema was changed by hand/);
  });

  it("a worker's role missing one grant, and one allowed to write a table: named, with the grants to apply", async () => {
    const s = db.schema;
    await admin.query(grantsScript({ schema: s, role, kind: 'runtime' }));
    await admin.query(`revoke execute on function ${s}.release(text, text, bigint) from ${role}`);
    await admin.query(`grant update on ${s}.keys to ${role}`);
    const run = await doctor(['-o', 'json']);
    expect(run.code).toBe(1);
    const roles = JSON.parse(run.stdout).findings.filter(
      (f: { area: string }) => f.area === 'roles',
    );
    expect(roles).toContainEqual(
      expect.objectContaining({
        status: 'risk',
        message: expect.stringMatching(
          new RegExp(`${role} is a worker's role.*release\\(text,text,bigint\\)`),
        ),
        next: expect.stringContaining(`--print-grants ${role} --kind runtime`),
      }),
    );
    expect(roles).toContainEqual(
      expect.objectContaining({
        status: 'risk',
        message: expect.stringMatching(
          new RegExp(`${role} may write the store's tables directly \\(UPDATE on keys\\)`),
        ),
      }),
    );
    // Run by that role, which may not create a schema: the comparison says it could not be made.
    const asWorker = await doctor(['-o', 'json'], urlAs(role));
    const schemaFinding = JSON.parse(asWorker.stdout).findings.find(
      (f: { area: string }) => f.area === 'schema',
    );
    expect(schemaFinding).toMatchObject({
      status: 'unchecked',
      message: expect.stringMatching(/could not build this version's schema.*permission denied/),
      next: expect.stringMatching(/as the schema's owner/),
    });
    await admin.query(`drop owned by ${role}`);
  });

  it('a schema nobody migrated: RISK naming migrate', async () => {
    const run = await runCli(
      ['doctor', '--connection', databaseUrl(), '--schema', `${db.schema}_none`],
      {},
    );
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/RISK\s+schema\s+schema \S+_none has no sideeffect tables/);
    expect(run.stdout).toMatch(/next: run `sideeffect migrate --schema \S+_none`/);
  });
});
