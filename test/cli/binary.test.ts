/**
 * The real `bin/sideeffect.js` in a child process, as an operator runs it: it starts, and the
 * shell sees each exit code (0 done, 1 refused, 2 bad arguments, 3 unreachable). Every other CLI
 * test runs the same `main` in-process (test/support/cli.ts), which costs milliseconds where a
 * spawn costs a second or more; here the in-process output is also compared with the binary's,
 * so what those tests see is what an operator sees.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../support/cli.js';
import { REPO_ROOT } from '../support/temporal.js';
import { asOwner, cliFixture } from './fixture.js';

const fx = cliFixture('cli_binary');
const spawned = { spawn: true };

describe('bin/sideeffect.js', () => {
  it('help and --version exit 0, and print what the in-process CLI prints', async () => {
    const help = await runCli(['help'], {}, spawned);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/^Usage: sideeffect \[options\] <command>/m);
    expect(help.stdout).toMatch(/^ {2}resolve /m);
    expect(await runCli(['help'], {})).toEqual(help);

    const version = await runCli(['--version'], {}, spawned);
    expect(version.code).toBe(0);
    const manifest = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8'));
    expect(version.stdout).toBe(`${manifest.version}\n`);
  });

  it('a bad command line exits 2 with its reason and the help to read, in JSON too when asked', async () => {
    const args = ['resolve', 'some-key', '--aplied', '-o', 'json'];
    const usage = await runCli(args, asOwner, spawned);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/^sideeffect: unknown option --aplied; did you mean --applied\?/);
    expect(usage.stderr).toMatch(/see: sideeffect help resolve/);
    expect(JSON.parse(usage.stdout)).toMatchObject({ error: { code: 'USAGE' } });
    expect(await runCli(args, asOwner)).toEqual(usage);
  });

  it('resolve decides in the store (exit 0); a second verdict is refused (exit 1)', async () => {
    const { key } = await fx.uncertainKey();
    const verdict = ['resolve', key, '--any-attempt', '--store-only', '--reason', 'seen'];
    const first = await fx.cli([...verdict, '--applied', '--result', '{"id":"ch_1"}'], {}, spawned);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/resolved: applied/);
    expect((await fx.store.inspect(key))?.state).toBe('done');

    const second = await fx.cli([...verdict, '--not-applied'], {}, spawned);
    expect(second.code).toBe(1);
    expect((await fx.store.inspect(key))?.state).toBe('done');
  });

  it('a store that does not answer exits 3', async () => {
    const down = await runCli(
      ['list'],
      { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none' },
      spawned,
    );
    expect(down.code).toBe(3);
    expect(down.stderr).toMatch(/^sideeffect: /);
  });
});
