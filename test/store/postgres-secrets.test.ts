/**
 * No secret in a stored reason (issue 24): an apply whose error carries a connection string with
 * its password (as driver errors do) leaves the key uncertain with that reason masked, in the
 * database itself and in everything that reads it back (the execution, inspect, events, and
 * `sideeffect show` and `list`, human and --json). A reason stored unmasked before this change is
 * masked on the way out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Runner } from '../../src/core/index.js';
import { bytes } from '../support/bytes.js';
import { runCli } from '../support/cli.js';
import { databaseUrl } from '../support/postgres.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

const SECRET = 's3cretPW';
const TOKEN = 'tok_4f9a8b7c6d5e4f3a2b1c';

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness('pg_secrets', { movableClock: false });
});
afterAll(() => h?.close());

describe('reasons are masked before they are stored and wherever they are read', () => {
  it('an apply error carrying a password and a token', async () => {
    const runner = new Runner(h.store, { ttlMs: 10_000 });
    const action = { key: 'charge-1', resource: 'card-1' };
    const execution = await runner.execute(action, async () => {
      throw new Error(
        `connection to postgres://payments:${SECRET}@ledger.internal:5432/ledger lost; retry with api_key=${TOKEN}`,
      );
    });
    expect(execution.outcome).toBe('uncertain');
    if (execution.outcome !== 'uncertain') return;
    expect(execution.reason).toContain('postgres://payments:***@ledger.internal:5432/ledger');
    expect(execution.error.message).not.toContain(SECRET);

    // A verdict's reason and a direct markUncertain are masked too.
    const other = { key: 'charge-2', resource: 'card-2' };
    const granted = await h.store.acquire(other, 10_000, { applying: true });
    if (granted.outcome !== 'granted') throw new Error(granted.outcome);
    await h.store.markUncertain(other, granted.lease, `lost at host=db password=${SECRET}`);
    await h.store.resolveUncertain(other.key, {
      applied: true,
      result: { payload: bytes('{}') },
      reason: `seen in the ledger with Authorization: Bearer ${TOKEN}`,
    });

    const { rows } = await h.db.pool.query(
      `select reason from keys where reason is not null
       union all select reason from events`,
    );
    const stored = rows.map((row) => row.reason as string).join('\n');
    expect(stored).toContain('payments:***@ledger.internal');
    expect(stored).not.toContain(SECRET);
    expect(stored).not.toContain(TOKEN);

    // A row written before reasons were masked on the way in.
    await h.db.pool.query(`update keys set reason = $1 where key = 'charge-1'`, [
      `old: postgres://payments:${SECRET}@ledger.internal/ledger`,
    ]);
    expect((await h.store.inspect('charge-1'))?.reason).toBe(
      'old: postgres://payments:***@ledger.internal/ledger',
    );
    expect((await h.store.acquire(action, 10_000)).outcome).toBe('uncertain');

    const env = { DATABASE_URL: databaseUrl(), SIDEEFFECT_SCHEMA: h.db.schema };
    for (const args of [
      ['show', 'charge-1'],
      ['show', 'charge-1', '--json'],
      ['show', 'charge-2'],
      ['list'],
      ['list', '--json'],
    ]) {
      const run = await runCli(args, env);
      expect(run.code).toBe(0);
      expect(run.stdout).toContain('***');
      expect(run.stdout + run.stderr).not.toContain(SECRET);
      expect(run.stdout + run.stderr).not.toContain(TOKEN);
    }
  });

  // Issue 31: the shapes a review found stored in clear and printed by `show` / `list -o json`.
  it('the usual credential shapes other than connection strings, in the store and in the CLI', async () => {
    const leaks = [
      'Command failed: PGPASSWORD=s3cr3tA psql',
      'DB_PASSWORD=s3cr3tB',
      'AWS_SECRET_ACCESS_KEY=s3cr3tC',
      "{ user: 'app', password: 's3cr3tD' }",
      'level=error password="s3cr3tE"',
      'x-api-key: s3cr3tF',
      'postgres://app:s3cr3t"G@db/x',
      'postgres://app:s3cr3t@H@db/x',
      'db:\n  password: s3cr3tI',
      'https://a.blob.core.windows.net/c?sv=1&sig=s3cr3tJ&sp=r',
      'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.s3cr3tK',
    ];
    for (const [i, reason] of leaks.entries()) {
      const action = { key: `shape-${i}`, resource: `shape-${i}` };
      const granted = await h.store.acquire(action, 10_000, { applying: true });
      if (granted.outcome !== 'granted') throw new Error(granted.outcome);
      await h.store.markUncertain(action, granted.lease, `lost: ${reason}`);
    }
    // And one written in clear by an older version: masked on the way out.
    await h.db.pool.query(`update keys set reason = $1 where key = 'shape-0'`, [
      `old: ${leaks.join(' | ')}`,
    ]);
    const { rows } = await h.db.pool.query(
      `select reason from keys where key like 'shape-%' and key <> 'shape-0'
       union all select reason from events where key like 'shape-%'`,
    );
    expect(rows.map((row) => row.reason as string).join('\n')).not.toMatch(/s3cr3t/i);
    const env = { DATABASE_URL: databaseUrl(), SIDEEFFECT_SCHEMA: h.db.schema };
    for (const args of [
      ['show', 'shape-0'],
      ['show', 'shape-6', '-o', 'json'],
      ['list', '-o', 'json'],
      ['list'],
    ]) {
      const run = await runCli(args, env);
      expect({ args, code: run.code }).toEqual({ args, code: 0 });
      expect(run.stdout).toContain('***');
      expect(run.stdout + run.stderr).not.toMatch(/s3cr3t/i);
    }
  });

  it('a Temporal identity (user@host) in a reason is not masked', async () => {
    const action = { key: 'identity', resource: 'identity' };
    const granted = await h.store.acquire(action, 10_000, { applying: true });
    if (granted.outcome !== 'granted') throw new Error(granted.outcome);
    await h.store.markUncertain(action, granted.lease, 'asked temporal-cli:root@vm');
    expect((await h.store.inspect('identity'))?.reason).toBe('asked temporal-cli:root@vm');
  });
});
