/**
 * A transactional effect's key and resource reach the store's last statements, the session reset
 * and the key's write, as text of the same query (migration 0016). Postgres converts that text
 * from the client encoding in force when it arrives, which is whatever the work left, before the
 * RESET in that query puts the encoding back. A key read in another encoding would be recorded
 * under another name, and the next call of the same key would run the effect again. The store
 * sends it in ASCII, which every client encoding reads alike.
 */
import type pg from 'pg';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { Runner, type TransactionContext } from '../../src/core/index.js';
import { bytes } from '../support/bytes.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

let h: PgHarness;
beforeEach(async () => {
  h = await pgHarness('pg_tx_encoding', { movableClock: false });
  await h.db.pool.query('create table ledger (key text not null)');
});
afterEach(() => h.close());

it('work that changes client_encoding: a non-ASCII key is recorded under its own name and replays', async () => {
  const runner = new Runner(h.store, { ttlMs: 10_000 });
  const action = { key: "clé-Ünïcode-😀-'q'-\\", resource: 'ressource-é', payload: bytes('p') };
  let runs = 0;
  const work = async ({ tx }: TransactionContext<pg.PoolClient>) => {
    runs += 1;
    await tx.query('insert into ledger (key) values ($1)', [action.key]);
    await tx.query(`set client_encoding = 'LATIN1'`);
    return { payload: bytes('ok') };
  };
  expect((await runner.executeInTransaction(action, work)).outcome).toBe('applied');
  expect((await h.store.inspect(action.key))?.resource).toBe(action.resource);
  expect((await runner.executeInTransaction(action, work)).outcome).toBe('replayed');
  expect(runs).toBe(1);
  const { rows } = await h.db.pool.query('select key from ledger');
  expect(rows).toEqual([{ key: action.key }]);
});
