/**
 * One configuration story (issue #32): the variables the CLI reads, the stores read too. With
 * SIDEEFFECT_SCHEMA (and DATABASE_URL) exported, `sideeffect migrate`, `new PgStore()` and
 * `new PgFencedSink()` without options all use that one schema; before, the stores went to
 * `sideeffect` and a worker refused the schema nobody migrated.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { migrationStatus, PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { runCli } from '../support/cli.js';
import { databaseUrl } from '../support/postgres.js';

const schema = `billing_${randomBytes(4).toString('hex')}`;
const admin = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
const saved = { ...process.env };

afterEach(() => {
  for (const name of ['SIDEEFFECT_SCHEMA', 'DATABASE_URL'])
    if (saved[name] === undefined) delete process.env[name];
    else process.env[name] = saved[name];
});

afterAll(async () => {
  await admin.query(`drop schema if exists "${schema}" cascade`);
  await admin.end();
});

describe('SIDEEFFECT_SCHEMA exported', () => {
  it('sideeffect migrate, new PgStore() and new PgFencedSink() use that one schema', async () => {
    const env = { DATABASE_URL: databaseUrl(), SIDEEFFECT_SCHEMA: schema };
    const migrated = await runCli(['migrate', '-o', 'json'], env);
    expect(migrated.code, migrated.stderr).toBe(0);
    expect(JSON.parse(migrated.stdout)).toMatchObject({ schema });

    Object.assign(process.env, env);
    const store = new PgStore();
    const sink = new PgFencedSink();
    let fence = 0;
    try {
      // What the worker's start-up check reads: the migrated schema, nothing pending.
      expect(await store.migrationStatus()).toMatchObject({ schema, pending: [] });
      const acquired = await store.acquire({ key: 'order-1/charge', resource: 'card:1' }, 10_000);
      expect(acquired.outcome).toBe('granted');
      fence = (acquired as { lease: { fence: number } }).lease.fence;
      await sink.writeFenced('card:1', fence, async () => {});
      expect(await sink.highestFence('card:1')).toBe(fence);
    } finally {
      await store.close();
      await sink.close();
    }
    // Both wrote into the migrated schema.
    const keys = await admin.query(`select key from "${schema}".keys`);
    expect(keys.rows).toEqual([{ key: 'order-1/charge' }]);
    const fences = await admin.query(`select resource, fence from "${schema}".sink_fences`);
    expect(fences.rows).toEqual([{ resource: 'card:1', fence: String(fence) }]);
    expect((await migrationStatus(admin)).schema).toBe(schema);
  });

  it('an explicit schema option still wins', async () => {
    process.env.SIDEEFFECT_SCHEMA = schema;
    const store = new PgStore({ pool: admin, schema: 'elsewhere' });
    expect((await store.migrationStatus()).schema).toBe('elsewhere');
  });
});
