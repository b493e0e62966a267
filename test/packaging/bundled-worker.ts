/**
 * A worker's start-up as a bundler sees it: migrate, then run one effect through PgStore. The
 * bundle-migrate test bundles this file with esbuild and runs the bundle from a directory holding
 * no .sql file, as a Lambda-style deploy would. Prints one JSON line.
 */
import pg from 'pg';
import { Runner } from '../../src/core/index.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';

async function main(): Promise<void> {
  const schema = process.env.SCHEMA!;
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
  try {
    const applied = await migrate(pool, { schema });
    const runner = new Runner(new PgStore({ pool, schema }), { ttlMs: 10_000 });
    const action = { key: 'bundle/1', resource: 'r', payload: new Uint8Array([1]) };
    const execution = await runner.execute(action, async () => ({ payload: new Uint8Array([2]) }));
    console.log(JSON.stringify({ applied, outcome: execution.outcome }));
  } finally {
    await pool.end();
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
