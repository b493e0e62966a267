/**
 * Transactional work that misuses the store's transaction, through the public API only (issue 47,
 * item 4), so it holds for whatever guards the transaction next. Already covered elsewhere and not
 * repeated here: a COMMIT through the client (refused before it is sent), a bare COMMIT around it,
 * COMMIT after SET CONSTRAINTS ALL IMMEDIATE, PREPARE TRANSACTION alone
 * (postgres-transactional.test.ts, postgres-transactional-guard.test.ts). Here:
 *
 * - every end of the transaction sent around the client (COMMIT, END, COMMIT AND CHAIN, PREPARE
 *   TRANSACTION; alone, after SET CONSTRAINTS ALL IMMEDIATE in the same message and in another)
 *   by work that swallows the error and goes on writing through `context.tx`: whatever the server
 *   did with the end, the attempt ends failed, nothing of it is committed, and the retry applies
 *   once. Before the client refused statements once the server reported no transaction, the write
 *   after a refused COMMIT committed on its own (autocommit) and the retry applied again;
 * - statements the work asks for while one is in flight wait for its answer, and the store waits
 *   for them before its finish: not awaited, they still run inside the transaction;
 * - work that waits for an advisory lock held elsewhere, or two works taking two locks in opposite
 *   orders: each ends (contended, failed, or applied) while the other holder still holds its lock,
 *   so it never waited for it past its TTL, and nothing of a failed one is committed.
 */
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Runner, type TransactionContext } from '../../src/core/index.js';
import { bytes } from '../support/bytes.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

/** A TTL long enough that only the misuse ends an attempt, never a slow machine. */
const TTL = 10_000;
/** The TTL of the lock tests: the bound a work waiting for a lock is ended at. */
const LOCK_TTL = 300;

/** A statement sent around the guarded client, as any SQL the work could get to the server. */
const raw = (context: TransactionContext<pg.PoolClient>, text: string): Promise<unknown> =>
  (pg.Client.prototype.query as (text: string) => Promise<unknown>).call(context.tx, text).then(
    () => 'ok',
    (error: unknown) => error,
  );

const immediate = 'set constraints all immediate';
const ends = ['commit', 'end', 'commit and chain', `prepare transaction 'sideeffect-misuse'`];
const shapes: [string, (end: string) => string[]][] = [
  ['alone', (end) => [end]],
  ['after SET CONSTRAINTS ALL IMMEDIATE, one message', (end) => [`${immediate}; ${end}`]],
  ['after SET CONSTRAINTS ALL IMMEDIATE, two messages', (end) => [immediate, end]],
];
const cases = ends.flatMap((end) =>
  shapes.map(([shape, statements]) => [`${end} (${shape})`, statements(end)] as const),
);

describe.each(['resource-row', 'key-row'] as const)(
  'transactional misuse, public API only (%s lease)',
  (lease) => {
    let h: PgHarness;
    let runner: Runner;
    let seq = 0;
    beforeAll(async () => {
      h = await pgHarness('pg_tx_misuse', { movableClock: false, lease });
    });
    beforeEach(async () => {
      await h.db.pool.query('create table if not exists ledger (key text not null, note text)');
      runner = new Runner(h.store, { ttlMs: TTL });
    });
    afterAll(() => h?.close());

    const ledger = async (key: string) =>
      (
        await h.db.pool.query('select note from ledger where key = $1 order by note', [key])
      ).rows.map((row) => row.note as string);
    const insert = (context: TransactionContext<pg.PoolClient>, note: string) =>
      context.tx.query(`insert into "${h.db.schema}".ledger values ($1, $2)`, [context.key, note]);

    it.each(cases)(
      'work that sends %s around the client, swallows the error and writes on: failed, nothing committed, the retry applies once',
      async (_, statements) => {
        seq += 1;
        const a = { key: `misuse-${seq}`, resource: `r-misuse-${seq}` };
        let afterwards: unknown;
        const misused = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
          await insert(context, 'before');
          for (const text of statements) await raw(context, text);
          afterwards = await insert(context, 'after').then(
            () => 'written',
            (error: unknown) => error,
          );
          return { payload: bytes('claimed') };
        });
        expect(misused.outcome).toBe('failed');
        expect(afterwards).not.toBe('written');
        expect(await ledger(a.key)).toEqual([]);
        expect(await h.store.inspect(a.key)).toBeUndefined();
        const retried = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
          await insert(context, 'retry');
          return { payload: bytes('once') };
        });
        expect(retried.outcome).toBe('applied');
        expect(await ledger(a.key)).toEqual(['retry']);
      },
    );

    it('a write sent while the COMMIT around the client is still in flight is refused too (the server answers first)', async () => {
      seq += 1;
      const a = { key: `misuse-${seq}`, resource: `r-misuse-${seq}` };
      const misused = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await insert(context, 'before');
        // Not awaited: the write is asked for before the COMMIT's answer has come back.
        const committing = raw(context, 'commit');
        const writing = insert(context, 'after').catch((error: unknown) => error);
        await Promise.all([committing, writing]);
        return { payload: bytes('claimed') };
      });
      expect(misused.outcome).toBe('failed');
      expect(await ledger(a.key)).toEqual([]);
      expect(await h.store.inspect(a.key)).toBeUndefined();
    });

    it('statements asked for at once and not awaited still run inside the transaction', async () => {
      seq += 1;
      const a = { key: `pipelined-${seq}`, resource: `r-pipelined-${seq}` };
      const done = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        // The first is in flight when the others are asked for: they wait for its answer.
        for (const note of ['n1', 'n2', 'n3']) void insert(context, note);
        return { payload: bytes('ok') };
      });
      expect(done.outcome).toBe('applied');
      expect(await ledger(a.key)).toEqual(['n1', 'n2', 'n3']);
    });

    /** A session of its own holding advisory lock `id` until `release()` is called. */
    const holdLock = async (id: number) => {
      const client = new pg.Client(h.db.config);
      client.on('error', () => {});
      await client.connect();
      await client.query('select pg_advisory_lock($1)', [id]);
      let held = true;
      return {
        held: () => held,
        release: async () => {
          held = false;
          await client.end();
        },
      };
    };

    it('work that waits for an advisory lock held elsewhere ends within its TTL (the lock still held), nothing committed', async () => {
      const short = new Runner(h.store, { ttlMs: LOCK_TTL });
      const outside = await holdLock(4_701);
      let endedWhileHeld = false;
      try {
        for (const lock of ['pg_advisory_xact_lock', 'pg_advisory_lock']) {
          seq += 1;
          const a = { key: `lock-${seq}`, resource: `r-lock-${seq}` };
          const waited = await short.executeInTransaction<pg.PoolClient>(a, async (context) => {
            await insert(context, 'before the lock');
            await context.tx.query(`select ${lock}(4701)`);
            await insert(context, 'after the lock');
            return { payload: bytes('locked') };
          });
          endedWhileHeld = outside.held();
          expect(endedWhileHeld).toBe(true);
          expect(['failed', 'contended']).toContain(waited.outcome);
          expect(await ledger(a.key)).toEqual([]);
          expect(await h.store.inspect(a.key)).toBeUndefined();
        }
      } finally {
        await outside.release();
      }
    });

    it('two works taking two advisory locks in opposite orders: both end, at most one commits, nothing of the other', async () => {
      const short = new Runner(h.store, { ttlMs: LOCK_TTL });
      seq += 1;
      const first = { key: `order-a-${seq}`, resource: `r-order-a-${seq}` };
      const second = { key: `order-b-${seq}`, resource: `r-order-b-${seq}` };
      // Each takes its first lock, then waits until the other has taken its own: a cycle for sure.
      let took = 0;
      let bothTook!: () => void;
      const cycle = new Promise<void>((resolve) => {
        bothTook = resolve;
      });
      const work =
        (locks: [number, number]) => async (context: TransactionContext<pg.PoolClient>) => {
          await context.tx.query('select pg_advisory_xact_lock($1)', [locks[0]]);
          took += 1;
          if (took === 2) bothTook();
          await cycle;
          await context.tx.query('select pg_advisory_xact_lock($1)', [locks[1]]);
          await insert(context, 'both locks');
          return { payload: bytes('ok') };
        };
      const outcomes = await Promise.all([
        short.executeInTransaction<pg.PoolClient>(first, work([4_711, 4_712])),
        short.executeInTransaction<pg.PoolClient>(second, work([4_712, 4_711])),
      ]);
      for (const outcome of outcomes)
        expect(['applied', 'failed', 'contended']).toContain(outcome.outcome);
      expect(outcomes.filter((o) => o.outcome === 'applied').length).toBeLessThanOrEqual(1);
      for (const [i, a] of [first, second].entries()) {
        const rows = await ledger(a.key);
        expect(rows).toEqual(outcomes[i]!.outcome === 'applied' ? ['both locks'] : []);
        if (outcomes[i]!.outcome !== 'applied')
          expect(await h.store.inspect(a.key)).toBeUndefined();
      }
    });
  },
);
