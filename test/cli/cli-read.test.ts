/**
 * The `sideeffect` command reading the store (list, show, their output forms), how it finds the
 * database (DATABASE_URL, the PG* variables, --connection, --schema), and its usage errors. Needs
 * Postgres alone. Shared setup: fixture.ts.
 */
import { describe, expect, it } from 'vitest';
import { encodeJson } from '../../src/core/index.js';
import { databaseUrl } from '../support/postgres.js';
import { cliFixture } from './fixture.js';

const fx = cliFixture('cli_read');
const { cli, uncertainKey } = fx;
const unreachable = 'postgres://postgres@127.0.0.1:1/none';

describe('sideeffect list and show against Postgres', () => {
  it('list, show and their --json forms', async () => {
    const done = { key: 'order-list/charge', resource: 'card-list' };
    await fx.runner.execute(done, async () => encodeJson({ id: 'ch_1' }));
    const doubtful = await uncertainKey();

    const list = await cli(['list']);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^STATE\s+FENCE\s+UPDATED\s+KEY/m);
    expect(list.stdout).toContain(done.key);
    expect(list.stdout).toContain(doubtful.key);

    const onlyUncertain = JSON.parse(
      (await cli(['list', '--state', 'uncertain', '--json'])).stdout,
    );
    expect(onlyUncertain.map((r: { key: string }) => r.key)).toEqual([doubtful.key]);

    const show = await cli(['show', done.key]);
    expect(show.code).toBe(0);
    expect(show.stdout).toMatch(/state:\s+done/);
    expect(show.stdout).toMatch(/result:\s+\{"id":"ch_1"\}/);
    expect(show.stdout).toMatch(/free -> applying/);
    expect(show.stdout).toMatch(/applying -> done/);

    const shown = JSON.parse((await cli(['show', doubtful.key, '--json'])).stdout);
    expect(shown).toMatchObject({
      key: doubtful.key,
      state: 'uncertain',
      reason: expect.stringMatching(/gateway timeout/),
    });
    expect(shown.events.map((e: { to: string }) => e.to)).toEqual(['applying', 'uncertain']);
    const fence = (await fx.store.inspect(doubtful.key))!.fence;
    expect((await cli(['show', doubtful.key])).stdout).toContain(
      `sideeffect resolve ${doubtful.key} --fence ${fence} --not-applied`,
    );
  });

  it('show of an unknown key exits 1', async () => {
    const missing = await cli(['show', 'nope']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no key "nope"/);
  });

  it('bad arguments: the reason and a one-line pointer to the help, exit code 2, nothing touched', async () => {
    const before = await fx.store.list({ limit: 1000 });
    for (const [args, pointer] of [
      [['frobnicate'], 'see: sideeffect help'],
      [['resolve', 'k', '--applied'], 'see: sideeffect help resolve'],
      [['list', '--state', 'bogus'], 'see: sideeffect help list'],
      [['purge', '--older-than', 'soon'], 'see: sideeffect help purge'],
    ] as const) {
      const ran = await cli([...args]);
      expect(ran.code, args.join(' ')).toBe(2);
      expect(ran.stderr).toMatch(/^sideeffect: /);
      // The reason stays on screen: two lines, not the 50 of the usage text.
      expect(ran.stderr.trimEnd().split('\n')).toEqual([expect.any(String), pointer]);
      expect(ran.stderr).not.toMatch(/Usage: sideeffect/);
    }
    expect(await fx.store.list({ limit: 1000 })).toEqual(before);
  });

  it('--help on every command', async () => {
    for (const args of [['--help'], ['resolve', '--help'], ['purge', '-h']]) {
      const ran = await cli(args);
      expect(ran.code).toBe(0);
      expect(ran.stdout).toMatch(/Usage: sideeffect/);
    }
  });

  it('an unreachable database exits 3 with what failed', async () => {
    const ran = await cli(['list'], { DATABASE_URL: unreachable });
    expect(ran.code).toBe(3);
    expect(ran.stderr).toMatch(/sideeffect: .*(ECONNREFUSED|connect)/);
  });
});

describe('one way to find the database, and the options the temporal CLI has', () => {
  const url = () => new URL(databaseUrl());
  /** The same database as DATABASE_URL, told through pg's own PG* variables only. */
  const pgVariables = () => ({
    DATABASE_URL: '',
    PGHOST: url().hostname,
    PGPORT: url().port || '5432',
    PGUSER: decodeURIComponent(url().username),
    PGPASSWORD: decodeURIComponent(url().password),
    PGDATABASE: url().pathname.slice(1),
  });

  it('without DATABASE_URL the PG* variables name the database, as pg reads them for a worker', async () => {
    const { key } = await uncertainKey();
    const ran = await cli(['list', '-o', 'json'], pgVariables());
    expect(ran.code, ran.stderr).toBe(0);
    expect(JSON.parse(ran.stdout).map((r: { key: string }) => r.key)).toContain(key);
    // PGDATABASE is really what was read: another name is another database.
    const other = await cli(['list'], { ...pgVariables(), PGDATABASE: 'sideeffect_no_such_db' });
    // A database that does not exist is a mistake to fix (exit 2), not an outage.
    expect(other.code).toBe(2);
    expect(other.stderr).toMatch(/database "sideeffect_no_such_db" does not exist/);
  });

  it('DATABASE_URL wins over PG*, and --connection over both', async () => {
    const { key } = await uncertainKey();
    const urlWins = await cli(['show', key], {
      ...pgVariables(),
      DATABASE_URL: databaseUrl(),
      PGDATABASE: 'sideeffect_no_such_db',
    });
    expect(urlWins.code, urlWins.stderr).toBe(0);
    const flagWins = await cli(['show', key, '--connection', databaseUrl()], {
      DATABASE_URL: unreachable,
    });
    expect(flagWins.code, flagWins.stderr).toBe(0);
    expect(flagWins.stdout).toMatch(/state:\s+uncertain/);
  });

  it('--schema wins over SIDEEFFECT_SCHEMA', async () => {
    const { key } = await uncertainKey();
    const ran = await cli(['show', key, '--schema', fx.db.schema], {
      SIDEEFFECT_SCHEMA: 'elsewhere',
    });
    expect(ran.code, ran.stderr).toBe(0);
    const wrong = await cli(['show', key, '-o', 'json'], { SIDEEFFECT_SCHEMA: 'elsewhere' });
    // A schema nobody migrated is refused with the fix, not reported as an outage.
    expect(wrong.code).toBe(1);
    expect(JSON.parse(wrong.stdout).error).toMatchObject({
      code: 'STORE_MISCONFIGURED',
      message: expect.stringContaining('sideeffect migrate --schema elsewhere'),
    });
  });

  it('-o text|json|jsonl: ISO-8601 times in JSON, one object a line in jsonl', async () => {
    const { key } = await uncertainKey();
    const lines = (await cli(['list', '-o', 'jsonl'])).stdout.trim().split('\n');
    expect(lines.length).toBeGreaterThan(1);
    const records = lines.map((line) => JSON.parse(line));
    const mine = records.find((r: { key: string }) => r.key === key);
    expect(mine.updatedAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const shown = JSON.parse((await cli(['show', key, '--output', 'json'])).stdout);
    expect(shown.updatedAt).toBe(mine.updatedAt);
    expect(shown.events[0].at).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect((await cli(['show', key, '-o', 'text'])).stdout).toMatch(/^key:\s+/);
  });
});
