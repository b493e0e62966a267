/**
 * The end of a transactional effect's transaction is guarded by the database, whatever SQL the
 * work sends (issue 39): the commit check reads the grant's row in tx_grants, which the work
 * cannot write, not a setting it can; and the client's refusal of a ROLLBACK reads the text as
 * Postgres's lexer does (a `$` inside an identifier opens no dollar quote).
 */
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Runner, type TransactionContext } from '../../src/core/index.js';
import { bytes } from '../support/bytes.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

const TTL = 10_000;

/** A statement sent around the guarded client, as any SQL the work could get to the server. */
const raw = (context: TransactionContext<pg.PoolClient>, text: string): Promise<unknown> =>
  (pg.Client.prototype.query as (text: string) => Promise<unknown>).call(context.tx, text).then(
    () => 'ok',
    (error: unknown) => error,
  );

describe.each([
  ['the schema owner', undefined],
  ['a runtime role', 'runtime' as const],
])('the commit check holds against the work (%s)', (_, role) => {
  let h: PgHarness;
  let runner: Runner;
  beforeEach(async () => {
    h = await pgHarness('pg_tx_guard', { movableClock: false, role });
    await h.db.pool.query(
      `create table ledger (key text not null, fence bigint not null);
       grant all on ledger to public`,
    );
    runner = new Runner(h.store, { ttlMs: TTL });
  });
  afterEach(() => h.close());

  const ledger = async () =>
    (await h.db.pool.query('select key, fence from ledger order by key')).rows;
  const insert = async ({ tx, key, fence }: TransactionContext<pg.PoolClient>) => {
    await tx.query(`insert into "${h.db.schema}".ledger values ($1, $2)`, [key, fence]);
  };

  it.each([
    [
      'a COMMIT after clearing the settings the check read',
      [
        `select set_config('sideeffect.transactional_key', '', true), set_config('sideeffect.constraints_early', '1', true)`,
        'commit',
      ],
    ],
    ['a COMMIT after SET CONSTRAINTS ALL IMMEDIATE', ['set constraints all immediate', 'commit']],
    ['both in one message', ['set constraints all immediate; commit']],
    ['PREPARE TRANSACTION', [`prepare transaction 'sideeffect-guard'`]],
  ])(
    '%s is refused at the commit (SE021): nothing kept, the retry applies once',
    async (_, statements) => {
      const a = { key: `k-${statements.length}-${statements[0]!.length}`, resource: 'r-guard' };
      const answers: unknown[] = [];
      const early = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await insert(context);
        for (const text of statements) answers.push(await raw(context, text));
        return { payload: bytes('claimed') };
      });
      expect(answers.at(-1)).toMatchObject({ code: 'SE021' });
      expect(early.outcome).toBe('failed');
      expect(await ledger()).toEqual([]);
      expect(await h.store.inspect(a.key)).toBeUndefined();
      const retried = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await insert(context);
        return { payload: bytes('once') };
      });
      expect(retried.outcome).toBe('applied');
      expect(await ledger()).toHaveLength(1);
      const { rows } = await h.db.pool.query(`select count(*)::int as n from tx_grants`);
      expect(rows[0].n).toBe(0);
    },
  );

  it('SET CONSTRAINTS ALL IMMEDIATE, alone, still works and the effect commits', async () => {
    const a = { key: 'immediate', resource: 'r-immediate' };
    const done = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
      await insert(context);
      await context.tx.query('set constraints all immediate');
      await context.tx.query('set constraints all immediate');
      return { payload: bytes('ok') };
    });
    expect(done.outcome).toBe('applied');
    expect(await ledger()).toEqual([{ key: 'immediate', fence: '1' }]);
  });

  it('the work cannot write the grant row the check reads', async () => {
    const a = { key: 'forged', resource: 'r-forged' };
    let deleted: unknown;
    const done = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
      deleted = await raw(context, `delete from "${h.db.schema}".tx_grants`);
      return { payload: bytes('ok') };
    });
    if (role) {
      expect(deleted).toMatchObject({ code: '42501' });
      expect(done.outcome).toBe('failed');
    } else {
      // The schema's owner writes every table of its schema; what it deletes, the store's finish
      // cannot find, and the key is still recorded (tx_record checks the grant by its fence).
      expect(done.outcome).toBe('applied');
    }
  });

  it('a ROLLBACK hidden behind `$` in an identifier is refused before it is sent: nothing written after it', async () => {
    const a = { key: 'dollar', resource: 'r-dollar' };
    const done = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
      await insert(context);
      await context.tx
        .query(
          `select 1 as x$a$; rollback; insert into "${h.db.schema}".ledger values ('after-rollback', ${context.fence}); select 1 as y$a$`,
        )
        .catch(() => {});
      return { payload: bytes('claimed') };
    });
    expect(done.outcome).toBe('failed');
    if (done.outcome === 'failed') expect(done.error).toMatchObject({ code: 'TRANSACTION_ENDED' });
    expect(await ledger()).toEqual([]);
    expect(await h.store.inspect(a.key)).toBeUndefined();
  });
});
