/**
 * A process that dies inside a transactional effect: it runs Runner.executeInTransaction, inserts
 * the effect's ledger row on the store's transaction, tells the parent, and waits for its
 * kill -9 before the commit can happen (test/store/postgres-transactional.test.ts).
 */
import pg from 'pg';
import { Runner } from '../../../src/core/index.js';
import { PgStore } from '../../../src/store/postgres/index.js';
import { databaseUrl } from '../../support/postgres.js';

const { schema, key, resource } = JSON.parse(process.argv[2]!) as {
  schema: string;
  key: string;
  resource: string;
};
const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
const runner = new Runner(new PgStore({ pool, schema }), { ttlMs: 60_000 });
await runner.executeInTransaction<pg.PoolClient>({ key, resource }, async ({ tx, fence }) => {
  await tx.query(`insert into "${schema}".ledger (key, fence) values ($1, $2)`, [key, fence]);
  process.send!('inserted');
  await new Promise(() => {});
  return { payload: new Uint8Array() };
});
