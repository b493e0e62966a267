import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { COMMANDS, help } from '../../src/cli/commands/index.js';
import { environment } from '../../src/cli/environment.js';
import { main } from '../../src/cli/main.js';
import { migrationScript } from '../../src/store/postgres/index.js';

/** Commands that must answer without a database: nothing listens at this address. */
const offline = {
  ...environment({}),
  database: { connectionString: 'postgres://nobody@127.0.0.1:1/none' },
};

async function cli(argv: string[], env = offline) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(argv, { out: (l) => out.push(l), err: (l) => err.push(l) }, env);
  return { code, out: out.join('\n'), err: err.join('\n') };
}

describe('sideeffect without a database', () => {
  it('--version prints the package version', async () => {
    const manifest = JSON.parse(
      readFileSync(new URL('../../package.json', import.meta.url), 'utf8'),
    );
    for (const flag of ['--version', '-v']) {
      expect(await cli([flag])).toEqual({ code: 0, out: manifest.version, err: '' });
    }
  });

  it('migrate --print-sql prints the script for SIDEEFFECT_SCHEMA', async () => {
    const ran = await cli(['migrate', '--print-sql'], { ...offline, schema: 'billing' });
    expect(ran.code).toBe(0);
    expect(ran.out).toBe(migrationScript({ schema: 'billing' }));
    // Created only where missing: an existing schema needs no CREATE on the database.
    expect(ran.out).toContain(
      `where nspname = 'billing') then execute 'create schema "billing"'; end if;`,
    );
  });

  it('a SIDEEFFECT_SCHEMA the store cannot use: exit 2 naming the rule, before any connection', async () => {
    for (const argv of [['list'], ['migrate', '--print-sql'], ['stats', '--json']]) {
      const ran = await cli(argv, { ...offline, schema: 'pg_sideeffect' });
      expect(ran.code).toBe(2);
      expect(ran.err).toMatch(
        /^sideeffect: --schema\/SIDEEFFECT_SCHEMA: invalid schema name \(reserved\)/,
      );
    }
    const flag = await cli(['list', '--schema', 'pg_flag'], offline);
    expect(flag.code).toBe(2);
    expect(flag.err).toMatch(/invalid schema name \(reserved\)/);
    const json = await cli(['list', '--json'], { ...offline, schema: 'x'.repeat(64) });
    expect(JSON.parse(json.out)).toEqual({
      error: {
        code: 'INVALID_SCHEMA',
        rule: 'too-long',
        message: expect.any(String),
        next: 'fix-and-retry',
      },
    });
  });

  it("help <command> and <command> --help print that command's usage", async () => {
    for (const argv of [
      ['help', 'resolve'],
      ['resolve', '--help'],
      ['-n', 'prod', 'resolve', '-h'],
    ]) {
      expect(await cli(argv), argv.join(' ')).toEqual({ code: 0, out: help('resolve'), err: '' });
    }
    expect((await cli(['help'])).out).toBe(help());
    const unknown = await cli(['help', 'reslove']);
    expect(unknown.code).toBe(2);
    expect(unknown.err).toMatch(/^sideeffect: unknown command "reslove"; did you mean resolve\?/);
  });

  it('a flag typo is answered in our words with the closest flag, in JSON too', async () => {
    const typo = await cli(['resolve', 'k', '--fenec', '3', '--not-applied', '--reason', 'x']);
    expect(typo.code).toBe(2);
    expect(typo.err.split('\n')[0]).toBe(
      'sideeffect: unknown option --fenec; did you mean --fence?',
    );
    expect(typo.err.split('\n')[1]).toBe('see: sideeffect help resolve');
    expect(typo.err).not.toContain(help('resolve'));
    // Never Node's parseArgs text (its unbalanced quote, its advice to use "--").
    expect(typo.err).not.toMatch(/Unknown option '|To specify a positional argument/);
    const json = await cli(['-o', 'json', 'list', '--stat', 'done']);
    expect(JSON.parse(json.out)).toEqual({
      error: { code: 'USAGE', message: 'unknown option --stat; did you mean --state?' },
    });
  });

  it('usage lines show -o json, the short flag the temporal CLI uses, never [--json]', () => {
    expect(help()).not.toContain('[--json]');
    for (const { name } of COMMANDS) {
      const text = help(name);
      expect(text, name).not.toContain('[--json]');
      if (name !== 'migrate') expect(text, name).toMatch(/\[-o json\]/);
    }
    expect(help()).toMatch(/-n, --namespace/);
    expect(help()).toMatch(/sideeffect help <command>/);
  });
});
