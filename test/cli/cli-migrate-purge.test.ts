/**
 * The `sideeffect` command's owner-side commands: migrate (and its --status, --dry-run and
 * --print-sql forms) and purge, with its refusals. Needs Postgres alone. Shared setup: fixture.ts.
 */
import { describe, expect, it } from 'vitest';
import { encodeJson } from '../../src/core/index.js';
import { migrate } from '../../src/store/postgres/index.js';
import { freshSchema } from '../support/postgres.js';
import { asOwner, cliFixture } from './fixture.js';

const fx = cliFixture('cli_owner');
const { cli, uncertainKey } = fx;

describe('sideeffect migrate and purge against Postgres', () => {
  it('migrate applies once, then says it is up to date', async () => {
    const empty = await freshSchema('cli_migrate');
    try {
      const first = await cli(['migrate'], { ...asOwner, SIDEEFFECT_SCHEMA: empty.schema });
      expect(first).toMatchObject({ code: 0 });
      expect(first.stdout).toMatch(/applied 0001_init/);
      const again = await cli(['migrate', '--json'], {
        ...asOwner,
        SIDEEFFECT_SCHEMA: empty.schema,
      });
      expect(again.code).toBe(0);
      expect(JSON.parse(again.stdout)).toEqual({ schema: empty.schema, applied: [] });
    } finally {
      await empty.drop();
    }
  });

  it('migrate --status and --dry-run list applied and pending, and change nothing', async () => {
    const empty = await freshSchema('cli_status');
    try {
      const env = { ...asOwner, SIDEEFFECT_SCHEMA: empty.schema };
      const before = JSON.parse((await cli(['migrate', '--status', '-o', 'json'], env)).stdout);
      expect(before.applied).toEqual([]);
      expect(before.pending[0]).toBe('0001_init.sql');
      const dry = await cli(['migrate', '--dry-run'], env);
      expect(dry.code).toBe(0);
      expect(dry.stdout).toMatch(/would apply 0001_init.sql, .* \(dry run: nothing changed\)/);
      const still = JSON.parse((await cli(['migrate', '--status', '--json'], env)).stdout);
      expect(still.pending).toEqual(before.pending);
      expect((await cli(['migrate'], env)).code).toBe(0);
      const after = JSON.parse((await cli(['migrate', '--status', '-o', 'json'], env)).stdout);
      expect(after.pending).toEqual([]);
      expect(after.applied.map((m: { name: string }) => m.name)).toEqual(before.pending);
      expect(after.applied[0].appliedAt).toMatch(/^\d{4}-\d\d-\d\dT/);
      const text = await cli(['migrate', '--status'], env);
      expect(text.stdout).toMatch(/0 pending/);
      const sql = JSON.parse((await cli(['migrate', '--print-sql', '-o', 'json'], env)).stdout);
      expect(sql).toMatchObject({
        schema: empty.schema,
        sql: expect.stringContaining('create schema'),
      });
    } finally {
      await empty.drop();
    }
  });

  it('migrate --transactional-lease key-row switches once, --status shows it, and there is no way back', async () => {
    const empty = await freshSchema('cli_lease');
    try {
      const env = { ...asOwner, SIDEEFFECT_SCHEMA: empty.schema };
      expect((await cli(['migrate'], env)).code).toBe(0);
      expect((await cli(['migrate', '--status'], env)).stdout).toMatch(
        /transactional lease: resource-row/,
      );
      const switched = await cli(['migrate', '--transactional-lease', 'key-row'], env);
      expect(switched).toMatchObject({ code: 0 });
      expect(switched.stdout).toMatch(/transactional effects take the key-row lease/);
      const status = JSON.parse((await cli(['migrate', '--status', '-o', 'json'], env)).stdout);
      expect(status.transactionalLease).toBe('key-row');
      const back = await cli(
        ['migrate', '--transactional-lease', 'resource-row', '-o', 'json'],
        env,
      );
      expect(back.code).not.toBe(0);
      expect(back.stdout + back.stderr).toMatch(/INVALID_ACTION[\s\S]*cannot go back/);
      const unknown = await cli(['migrate', '--transactional-lease', 'key'], env);
      expect(unknown.code).not.toBe(0);
      expect(unknown.stderr).toMatch(/--transactional-lease must be key-row or resource-row/);
      const mixed = await cli(['migrate', '--status', '--transactional-lease', 'key-row'], env);
      expect(mixed.code).not.toBe(0);
      expect(mixed.stderr).toMatch(/--transactional-lease changes the schema: not with --status/);
    } finally {
      await empty.drop();
    }
  });

  it('a schema a newer sideeffect migrated: --status and --dry-run say what migrate() says', async () => {
    const newer = await freshSchema('cli_newer');
    try {
      const env = { ...asOwner, SIDEEFFECT_SCHEMA: newer.schema };
      await migrate(newer.pool, { schema: newer.schema });
      await newer.pool.query(
        `insert into migration_history (version, name, sha256, backward_compatible)
         values (9998, '9998_next.sql', 'x', true)`,
      );
      const lines: string[] = [];
      await migrate(newer.pool, { schema: newer.schema, log: (line) => lines.push(line) });
      const accepted = lines[0]!.replace(/^sideeffect: /, '');
      expect((await cli(['migrate', '--status'], env)).stdout).toContain(accepted);
      expect((await cli(['migrate', '--dry-run'], env)).code).toBe(0);
      await newer.pool.query(
        `insert into migration_history (version, name, sha256) values (9999, '9999_next.sql', 'y')`,
      );
      const refused = await migrate(newer.pool, { schema: newer.schema }).then(
        () => expect.fail('migrate() accepted a migration not declared backward-compatible'),
        (error: Error) => error,
      );
      expect(refused).toMatchObject({ code: 'MIGRATION_CONFLICT' });
      expect((await cli(['migrate', '--status'], env)).stdout).toContain(refused.message);
      const dry = await cli(['migrate', '--dry-run', '-o', 'json'], env);
      expect(dry.code).toBe(1);
      expect(JSON.parse(dry.stdout).error).toMatchObject({
        code: 'MIGRATION_CONFLICT',
        message: refused.message,
      });
    } finally {
      await newer.drop();
    }
  });

  it('purge deletes old done keys only', async () => {
    const doubtful = await uncertainKey();
    const done = { key: 'order-purge/charge', resource: 'card-purge' };
    await fx.runner.execute(done, async () => encodeJson('ok'));
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    // No terminal to ask (as in cron and CI): refused without --yes, nothing deleted.
    const unasked = await cli(['purge', '--older-than', '1s', '--force'], asOwner);
    expect(unasked.code).toBe(2);
    expect(unasked.stderr).toMatch(/purge needs --yes when stdin or stdout is not a terminal/);
    // Below the floor (7 days) without --force: refused, nothing deleted.
    const young = await cli(['purge', '--older-than', '1s', '--yes', '--json'], asOwner);
    expect(young.code).toBe(1);
    expect(JSON.parse(young.stdout).error.code).toBe('PURGE_BELOW_FLOOR');
    expect(young.stderr).toMatch(/--force/);
    expect((await fx.store.inspect(done.key))?.state).toBe('done');
    // On a terminal, a question; anything but yes deletes nothing.
    const asked: string[] = [];
    const answer = (yes: boolean) => ({
      confirm: async (question: string) => {
        asked.push(question);
        return yes;
      },
    });
    const args = ['purge', '--older-than', '1s', '--force'];
    expect((await cli(args, asOwner, answer(false))).code).toBe(1);
    expect(asked[0]).toMatch(/^purge done keys older than 1 s from schema .*\[y\/N\] $/);
    expect((await fx.store.inspect(done.key))?.state).toBe('done');
    expect((await cli(args, asOwner, answer(true))).code).toBe(0);
    expect(await fx.store.inspect(done.key)).toBeUndefined();
    const purged = await cli(
      ['purge', '--older-than', '1s', '--yes', '--force', '--json'],
      asOwner,
    );
    expect(purged.code).toBe(0);
    expect(JSON.parse(purged.stdout).purged).toBe(0);
    expect((await fx.store.inspect(doubtful.key))?.state).toBe('uncertain');
  });
});
