/**
 * A new user with nothing configured (no DATABASE_URL, no PG* variables, no USER for pg to
 * default to) is told what is missing and how to set it, as a configuration mistake (exit 2),
 * before anything connects: not `database "undefined", user "undefined"`. A store or sink that
 * opens its own pool refuses the same at its first call (built and never used, as in a test of
 * workflows on the in-memory store, it stays harmless).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { connectionConfig, unconfiguredConnection } from '../../src/store/postgres/connection.js';
import { PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { runCli } from '../support/cli.js';

describe('nothing names a database', () => {
  it.each([
    ['list', ['list']],
    ['migrate --status', ['migrate', '--status']],
  ])('the CLI (%s) says what is missing and how to set it, exit 2', async (_, args) => {
    const run = await runCli([...args, '-o', 'json'], {}, { bare: true });
    expect(run.code, run.stderr).toBe(2);
    const { error } = JSON.parse(run.stdout) as {
      error: { code: string; message: string; next: string };
    };
    expect(error.code).toBe('STORE_MISCONFIGURED');
    expect(error.next).toBe('fix-and-retry');
    expect(error.message).toContain('DATABASE_URL is not set, nor PGUSER');
    expect(error.message).toContain('set DATABASE_URL=postgres://');
    expect(error.message).toContain('--connection URL');
    expect(error.message).not.toContain('undefined');
  });

  it('the same in text, on stderr', async () => {
    const run = await runCli(['list'], {}, { bare: true });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('no database to connect to');
    expect(run.stderr).toContain('set DATABASE_URL=postgres://');
    expect(run.stderr).not.toContain('"undefined"');
  });

  it('--connection, PGUSER or USER each name one: nothing refused before connecting', () => {
    expect(unconfiguredConnection(connectionConfig({ env: {} }))?.code).toBe('STORE_MISCONFIGURED');
    for (const env of [{ PGUSER: 'ann' }, { USER: 'ann' }, { DATABASE_URL: 'postgres://h/db' }])
      expect(
        unconfiguredConnection(connectionConfig({ env })),
        JSON.stringify(env),
      ).toBeUndefined();
    expect(
      unconfiguredConnection(connectionConfig({ env: {}, connectionString: 'postgres://h/db' })),
    ).toBeUndefined();
  });

  describe('a worker whose PgStore opens its own pool', () => {
    const saved: Record<string, string | undefined> = {};
    const names = ['DATABASE_URL', 'PGUSER', 'USER', 'USERNAME'];
    beforeEach(() => {
      for (const name of names) {
        saved[name] = process.env[name];
        delete process.env[name];
      }
    });
    afterEach(() => {
      for (const name of names) if (saved[name] !== undefined) process.env[name] = saved[name];
    });

    it('is built, and refused at its first call with the same fix, as a sink is', async () => {
      const store = new PgStore({ schema: 'sideeffect' });
      const sink = new PgFencedSink();
      const refusal = expect.objectContaining({
        code: 'STORE_MISCONFIGURED',
        next: 'fix-and-retry',
        message: expect.stringContaining('set DATABASE_URL=postgres://'),
      });
      await expect(store.acquire({ key: 'k', resource: 'r' }, 1_000)).rejects.toEqual(refusal);
      await expect(sink.writeFenced('r', 1, async () => 'written')).rejects.toEqual(refusal);
      await store.close?.();
      await sink.close?.();
    });
  });
});
