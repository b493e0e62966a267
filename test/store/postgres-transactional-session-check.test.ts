/**
 * The session check of a transactional effect read once per effect (issue 47, migration 0023):
 * the fingerprint the last finish took on a connection is the next effect's "before", and SQL
 * prepared statements are counted only after work whose statements may prepare or drop one
 * (PREPARE, DEALLOCATE, DISCARD, dynamic SQL naming them). A connection whose session the work
 * left alone is kept, however many statements the driver prepared on it; one the work left a
 * prepared statement on is discarded, and the pool's next user never sees it.
 */
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Runner, type TransactionContext } from '../../src/core/index.js';
import { PgStore } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

const TTL = 10_000;

describe('the session check of transactional effects', () => {
  let h: PgHarness;
  let pool: pg.Pool;
  let runner: Runner;
  let seq = 0;
  beforeEach(async () => {
    h = await pgHarness('pg_tx_session_check', { movableClock: false });
    await h.db.pool.query('create table ledger (key text not null)');
    pool = new pg.Pool({ ...h.db.config, max: 1 });
    pool.on('error', () => {});
    runner = new Runner(new PgStore({ pool, schema: h.db.schema }), { ttlMs: TTL });
  });
  afterEach(async () => {
    await pool.end();
    await h.close();
  });

  /** One effect whose work runs `sql` after its insert; its outcome. */
  const effect = async (sql: string) => {
    seq += 1;
    const key = `check-${seq}`;
    const done = await runner.executeInTransaction(
      { key, resource: `r-${seq}` },
      async ({ tx }: TransactionContext<pg.PoolClient>) => {
        await tx.query(`insert into "${h.db.schema}".ledger values ($1)`, [key]);
        if (sql) await tx.query(sql);
        return { payload: bytes('ok') };
      },
    );
    return done.outcome;
  };
  /** The pool's one connection as its next user finds it. */
  const view = async () =>
    (
      await pool.query(
        `select pg_backend_pid() as pid,
          (select count(*) from pg_prepared_statements where from_sql)::int as prepared`,
      )
    ).rows[0] as { pid: number; prepared: number };

  it('a connection with a thousand named statements of the driver is kept, effect after effect', async () => {
    const client = await pool.connect();
    for (let i = 0; i < 1_000; i++)
      await client.query({ name: `app-${i}`, text: `select ${i}::int as n` });
    client.release();
    const before = await view();
    for (let i = 0; i < 5; i++) expect(await effect('')).toBe('applied');
    expect(await view()).toEqual(before);
    const { rows } = await pool.query(
      'select count(*)::int as n from pg_prepared_statements where not from_sql',
    );
    expect(rows[0].n).toBeGreaterThanOrEqual(1_000);
  });

  it.each([
    ['PREPARE', 'prepare leaked as select 1'],
    [
      'a PREPARE in dynamic SQL',
      `do $$ begin execute 'prepare leaked_dynamic as select 1'; end $$`,
    ],
  ])('%s the work leaves behind discards the connection', async (_, sql) => {
    expect(await effect('')).toBe('applied');
    const before = await view();
    expect(await effect(sql)).toBe('applied');
    const after = await view();
    expect(after.pid).not.toBe(before.pid);
    expect(after.prepared).toBe(0);
    // The new connection's first effect reads its session afresh, and keeps it.
    expect(await effect('')).toBe('applied');
    expect(await view()).toEqual(after);
  });

  it('a statement the work prepares and drops again leaves the connection as it was: kept', async () => {
    const before = await view();
    expect(await effect('prepare passing as select 1; deallocate passing')).toBe('applied');
    expect(await effect('')).toBe('applied');
    expect(await view()).toEqual(before);
  });
});
