import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { build } from 'esbuild';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { Runner } from '../../src/core/index.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { listMigrations } from '../../src/store/postgres/migrate.js';
import { runCli } from '../support/cli.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';

const schemas: FreshSchema[] = [];
const outDir = mkdtempSync(path.join(tmpdir(), 'sideeffect-bundle-'));
afterAll(async () => {
  await Promise.all(schemas.map((db) => db.drop()));
  rmSync(outDir, { recursive: true, force: true });
});

async function fresh(name: string): Promise<FreshSchema> {
  const db = await freshSchema(name);
  schemas.push(db);
  return db;
}

describe('migrations travel inside the code', () => {
  it('a worker bundled with esbuild migrates a fresh schema from the bundle alone', async () => {
    const db = await fresh('bundle');
    const outfile = path.join(outDir, 'worker.cjs');
    await build({
      entryPoints: [new URL('./bundled-worker.ts', import.meta.url).pathname],
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      outfile,
      external: ['pg-native'],
      logLevel: 'silent',
    });
    expect(readdirSync(outDir)).toEqual(['worker.cjs']);

    const out = execFileSync(process.execPath, [outfile], {
      cwd: outDir,
      env: { ...process.env, DATABASE_URL: databaseUrl(), SCHEMA: db.schema },
      encoding: 'utf8',
    });
    expect(JSON.parse(out)).toEqual({
      applied: listMigrations().map((m) => m.name),
      outcome: 'applied',
    });
    expect(await migrate(db.pool, { schema: db.schema })).toEqual([]);
  });

  it('migrate --print-sql builds a schema that migrate() then finds up to date', async () => {
    const db = await fresh('print_sql');
    const printed = await runCli(['migrate', '--print-sql'], {
      SIDEEFFECT_SCHEMA: db.schema,
      DATABASE_URL: 'postgres://nobody@127.0.0.1:1/nowhere',
    });
    expect(printed.code).toBe(0);
    const client = new pg.Client({ connectionString: databaseUrl() });
    await client.connect();
    try {
      await client.query(printed.stdout);
    } finally {
      await client.end();
    }
    expect(await migrate(db.pool, { schema: db.schema })).toEqual([]);
    const runner = new Runner(new PgStore({ pool: db.pool, schema: db.schema }), { ttlMs: 10_000 });
    const action = { key: 'sql/1', resource: 'r', payload: new Uint8Array([1]) };
    const execution = await runner.execute(action, async () => ({ payload: new Uint8Array([2]) }));
    expect(execution.outcome).toBe('applied');
  });
});
