/**
 * Transactional effects on PgStore (Runner.executeInTransaction): acquire, the effect's own
 * statements and complete commit together or not at all. The downstream here is a `ledger`
 * table in the store's schema; every assertion reads it and the key's record back.
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  FenceStaleError,
  InvalidActionError,
  KeyConflictError,
  NotTransactionalError,
  type Result,
  Runner,
  type TransactionContext,
  TransactionEndedError,
} from '../../src/core/index.js';
import { MemoryStore } from '../../src/store/memory.js';
import { PgStore } from '../../src/store/postgres/index.js';
import { bytes, text } from '../support/bytes.js';
import { backendOf, someoneWaitsFor } from '../support/lock-waits.js';
import { LONG_TIER } from '../support/tier.js';
import { type PgHarness, pgHarness, sidePool } from './pg-support/harness.js';

const TTL = 10_000;
const CHILD = fileURLToPath(new URL('./pg-worker/tx-child.ts', import.meta.url));

// One lease per tier, like the conformance matrix: `npm test` the default, the long tier the
// key-row lease (migration 0025).
describe.each(LONG_TIER ? (['key-row'] as const) : (['resource-row'] as const))(
  'PgStore transactional effects (%s lease)',
  (lease) => {
    let h: PgHarness;
    let runner: Runner;
    let seq = 0;
    beforeEach(async () => {
      h = await pgHarness('pg_transactional', { lease });
      await h.db.pool.query(
        'create table ledger (key text not null, fence bigint not null, note text)',
      );
      runner = new Runner(h.store, { ttlMs: TTL });
    });
    afterEach(() => h.close());

    const action = () => {
      seq += 1;
      return { key: `tx-${seq}`, resource: `account-${seq}`, payload: bytes(`charge ${seq}`) };
    };
    const ledger = async (key: string) =>
      (await h.db.pool.query('select fence, note from ledger where key = $1', [key])).rows;
    /** The effect: one ledger row on the store's transaction, its fence as the result. */
    const insert =
      (key: string, note = 'ok') =>
      async ({ tx, fence }: TransactionContext<pg.PoolClient>): Promise<Result> => {
        await tx.query('insert into ledger (key, fence, note) values ($1, $2, $3)', [
          key,
          fence,
          note,
        ]);
        return { payload: bytes(`fence ${fence}`) };
      };

    it('applies once: the effect row, the done key and its events commit together', async () => {
      const a = action();
      const first = await runner.executeInTransaction(a, insert(a.key));
      expect(first.outcome).toBe('applied');
      if (first.outcome !== 'applied') return;
      expect(text(first.result.payload)).toBe(`fence ${first.lease.fence}`);
      expect(await ledger(a.key)).toEqual([{ fence: String(first.lease.fence), note: 'ok' }]);
      const record = await h.store.inspect(a.key);
      expect(record).toMatchObject({ state: 'done', fence: first.lease.fence });
      expect(text(record!.result!.payload)).toBe(`fence ${first.lease.fence}`);
      expect((await h.store.events(a.key)).map((e) => `${e.from}->${e.to}`)).toEqual([
        'free->done',
      ]);
      // The resource is free again: a plain acquire of another key is granted.
      const next = await h.store.acquire({ key: `${a.key}-next`, resource: a.resource }, TTL);
      if (next.outcome !== 'granted') throw new Error(next.outcome);
      expect(next.lease.fence).toBe(first.lease.fence + 1);
      await h.store.complete({ key: `${a.key}-next`, resource: a.resource }, next.lease, {
        payload: bytes('plain'),
      });
      // A second transactional grant on the now free resource continues the sequence.
      const b = { ...action(), resource: a.resource };
      const second = await runner.executeInTransaction(b, insert(b.key));
      if (second.outcome !== 'applied') throw new Error(second.outcome);
      expect(second.lease.fence).toBe(first.lease.fence + 2);
    });

    it('replays a done key with the stored result and never runs the effect again', async () => {
      const a = action();
      await runner.executeInTransaction(a, insert(a.key));
      let ran = false;
      const again = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        ran = true;
        return insert(a.key)(context);
      });
      expect(again.outcome).toBe('replayed');
      expect(ran).toBe(false);
      if (again.outcome === 'replayed') expect(text(again.result.payload)).toMatch(/^fence \d+$/);
      expect(await ledger(a.key)).toHaveLength(1);
    });

    it('an effect that throws after its insert rolls everything back: failed, then applied once', async () => {
      const a = action();
      const failed = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await insert(a.key)(context);
        throw new Error('downstream said no after the insert');
      });
      expect(failed.outcome).toBe('failed');
      expect(await ledger(a.key)).toEqual([]);
      expect(await h.store.inspect(a.key)).toBeUndefined();
      expect(await h.store.events(a.key)).toEqual([]);
      const retried = await runner.executeInTransaction(a, insert(a.key, 'retry'));
      expect(retried.outcome).toBe('applied');
      expect((await ledger(a.key)).map((r) => r.note)).toEqual(['retry']);
    });

    it('a statement error swallowed inside the effect still rolls back: failed, nothing kept', async () => {
      const a = action();
      const swallowed = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await insert(a.key)(context);
        await context.tx.query('select * from no_such_table').catch(() => {});
        return { payload: bytes('claimed success') };
      });
      expect(swallowed.outcome).toBe('failed');
      expect(await ledger(a.key)).toEqual([]);
      expect(await h.store.inspect(a.key)).toBeUndefined();
    });

    it('an oversized result is refused before commit: failed, nothing kept', async () => {
      const a = action();
      const big = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await insert(a.key)(context);
        return { payload: new Uint8Array(2 * 1024 * 1024) };
      });
      expect(big.outcome).toBe('failed');
      if (big.outcome === 'failed') expect(big.error).toBeInstanceOf(InvalidActionError);
      expect(await ledger(a.key)).toEqual([]);
    });

    it('a resource held by a live lease answers contended without running the effect', async () => {
      const a = action();
      const other = await h.store.acquire({ key: `${a.key}-holder`, resource: a.resource }, TTL);
      expect(other.outcome).toBe('granted');
      let ran = false;
      const contended = await runner.executeInTransaction(a, async () => {
        ran = true;
        return { payload: bytes('x') };
      });
      expect(contended.outcome).toBe('contended');
      if (contended.outcome === 'contended') expect(contended.retryAfterMs).toBeGreaterThan(0);
      expect(ran).toBe(false);
      expect(await h.store.inspect(a.key)).toBeUndefined();
    });

    it('takes over an expired ordinary holder like acquire does, and fences keep growing', async () => {
      const a = action();
      const holder = { key: `${a.key}-holder`, resource: a.resource };
      const held = await h.store.acquire(holder, TTL, { applying: true });
      if (held.outcome !== 'granted') throw new Error(held.outcome);
      await h.advance(TTL + 1);
      const taken = await runner.executeInTransaction(a, insert(a.key));
      expect(taken.outcome).toBe('applied');
      if (taken.outcome === 'applied') expect(taken.lease.fence).toBe(held.lease.fence + 1);
      expect(await h.store.inspect(holder.key)).toMatchObject({
        state: 'uncertain',
        reason: 'lease lost during apply',
      });
      const after = await h.store.acquire({ key: `${a.key}-after`, resource: a.resource }, TTL);
      if (after.outcome !== 'granted') throw new Error(after.outcome);
      expect(after.lease.fence).toBe(held.lease.fence + 2);
    });

    it('two callers of one key at once: one applies, the other waits for its commit and replays', async () => {
      const a = action();
      let release!: () => void;
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      let inserted!: () => void;
      const insertedOnce = new Promise<void>((resolve) => {
        inserted = resolve;
      });
      const first = runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        const result = await insert(a.key)(context);
        inserted();
        await gate;
        return result;
      });
      await insertedOnce;
      const second = runner.executeInTransaction(a, insert(a.key, 'second'));
      await new Promise((resolve) => setTimeout(resolve, 100));
      release();
      const outcomes = await Promise.all([first, second]);
      expect(outcomes.map((o) => o.outcome)).toEqual(['applied', 'replayed']);
      expect((await ledger(a.key)).map((r) => r.note)).toEqual(['ok']);
    });

    it('a key used transactionally and not is a KeyConflictError("transactional"), both ways', async () => {
      const a = action();
      await runner.executeInTransaction(a, insert(a.key));
      const plain = runner.execute(a, async () => ({ payload: bytes('plain') }));
      await expect(plain).rejects.toBeInstanceOf(KeyConflictError);
      await expect(plain).rejects.toMatchObject({ code: 'KEY_CONFLICT', field: 'transactional' });

      const b = action();
      await runner.execute(b, async () => ({ payload: bytes('plain') }));
      let ran = false;
      const tx = runner.executeInTransaction(b, async () => {
        ran = true;
        return { payload: bytes('x') };
      });
      await expect(tx).rejects.toMatchObject({ code: 'KEY_CONFLICT', field: 'transactional' });
      expect(ran).toBe(false);
      expect(await ledger(b.key)).toEqual([]);

      // Another payload under a transactional key is still a payload conflict.
      await expect(
        runner.executeInTransaction({ ...a, payload: bytes('other') }, insert(a.key)),
      ).rejects.toMatchObject({ code: 'KEY_CONFLICT', field: 'payload' });
    });

    it('refuses bad input and stores that cannot run transactions with typed errors', async () => {
      await expect(
        runner.executeInTransaction({ key: '', resource: 'r' }, async () => ({
          payload: bytes(''),
        })),
      ).rejects.toBeInstanceOf(InvalidActionError);
      await expect(
        new Runner(h.store, { ttlMs: 0 }).executeInTransaction(action(), async () => ({
          payload: bytes(''),
        })),
      ).rejects.toBeInstanceOf(InvalidActionError);
      const memory = new Runner(new MemoryStore(), { ttlMs: TTL });
      await expect(
        memory.executeInTransaction(action(), async () => ({ payload: bytes('') })),
      ).rejects.toMatchObject({ code: 'NOT_TRANSACTIONAL' });
      await expect(
        memory.executeInTransaction(action(), async () => ({ payload: bytes('') })),
      ).rejects.toBeInstanceOf(NotTransactionalError);
    });

    it('a connection killed during the effect rolls back; the retry applies once', async () => {
      const a = action();
      const side = sidePool(h.db);
      try {
        const killed = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
          await insert(a.key)(context);
          await side.query('select pg_terminate_backend($1)', [
            (context.tx as pg.PoolClient & { processID: number }).processID,
          ]);
          await context.tx.query('select 1');
          return { payload: bytes('unreachable') };
        });
        expect(killed.outcome).toBe('failed');
      } finally {
        await side.end();
      }
      expect(await ledger(a.key)).toEqual([]);
      expect(await h.store.inspect(a.key)).toBeUndefined();
      expect((await runner.executeInTransaction(a, insert(a.key, 'retry'))).outcome).toBe(
        'applied',
      );
      expect((await ledger(a.key)).map((r) => r.note)).toEqual(['retry']);
    });

    it('work that commits the store transaction itself: the COMMIT fails and rolls back, refused with TRANSACTION_ENDED, nothing kept', async () => {
      const a = action();
      let committed: unknown;
      const early = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await context.tx.query('begin'); // only a warning inside a transaction
        await insert(a.key)(context);
        committed = await context.tx.query('commit').then(
          () => 'committed',
          (error: unknown) => error,
        );
        return { payload: bytes('claimed success') };
      });
      // Never sent: a ROLLBACK or COMMIT that reached the server would free the resource's row at once.
      expect(committed).toMatchObject({ code: 'TRANSACTION_ENDED' });
      expect(early.outcome).toBe('failed');
      if (early.outcome === 'failed') {
        expect(early.error).toBeInstanceOf(TransactionEndedError);
        expect(early.error).toMatchObject({ code: 'TRANSACTION_ENDED', key: a.key });
      }
      expect(await ledger(a.key)).toEqual([]);
      expect(await h.store.inspect(a.key)).toBeUndefined();
      // A process that dies right after such a COMMIT leaves nothing either: the retry applies once.
      const retried = await runner.executeInTransaction(a, insert(a.key, 'retry'));
      expect(retried.outcome).toBe('applied');
      expect((await ledger(a.key)).map((r) => r.note)).toEqual(['retry']);
    });

    it('a COMMIT that goes around the client the work is given still fails at the commit check (SE021)', async () => {
      const a = action();
      let committed: unknown;
      const early = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await insert(a.key)(context);
        committed = await (pg.Client.prototype.query as (text: string) => Promise<unknown>)
          .call(context.tx, 'commit')
          .then(
            () => 'committed',
            (error: unknown) => error,
          );
        return { payload: bytes('claimed success') };
      });
      expect(committed).toMatchObject({ code: 'SE021' });
      expect(early.outcome).toBe('failed');
      if (early.outcome === 'failed')
        expect(early.error).toMatchObject({ code: 'TRANSACTION_ENDED' });
      expect(await ledger(a.key)).toEqual([]);
      expect(await h.store.inspect(a.key)).toBeUndefined();
    });

    it('a COMMIT error thrown out of the work is refused as TRANSACTION_ENDED too', async () => {
      const a = action();
      const thrown = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await insert(a.key)(context);
        await context.tx.query('commit');
        return { payload: bytes('unreachable') };
      });
      expect(thrown.outcome).toBe('failed');
      if (thrown.outcome === 'failed')
        expect(thrown.error).toMatchObject({ code: 'TRANSACTION_ENDED' });
      expect(await ledger(a.key)).toEqual([]);
      expect(await h.store.inspect(a.key)).toBeUndefined();
    });

    it('work that rolls the store transaction back (and opens another) is refused: the key is never recorded done', async () => {
      const a = action();
      const rolled = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await context.tx.query('rollback');
        await context.tx.query('begin');
        await insert(a.key)(context);
        return { payload: bytes('claimed success') };
      });
      expect(rolled.outcome).toBe('failed');
      if (rolled.outcome === 'failed') expect(rolled.error).toBeInstanceOf(TransactionEndedError);
      expect(await ledger(a.key)).toEqual([]);
      expect(await h.store.inspect(a.key)).toBeUndefined();

      // Rolled back and nothing reopened: what it wrote after committed on its own (its fault),
      // but the key is not recorded done for it, and the next grant gets a fence never used.
      const b = action();
      const before = await h.db.pool.query('select fence from resources where resource = $1', [
        b.resource,
      ]);
      expect(before.rows).toEqual([]);
      const alone = await runner.executeInTransaction<pg.PoolClient>(b, async (context) => {
        await context.tx.query('rollback');
        await insert(b.key, 'autocommitted')(context);
        return { payload: bytes('claimed success') };
      });
      expect(alone.outcome).toBe('failed');
      if (alone.outcome === 'failed')
        expect(alone.error).toMatchObject({ code: 'TRANSACTION_ENDED' });
      expect(await h.store.inspect(b.key)).toBeUndefined();
      const retried = await runner.executeInTransaction(b, insert(b.key, 'retry'));
      if (retried.outcome !== 'applied') throw new Error(retried.outcome);
      const fences = (await ledger(b.key)).map((r) => Number(r.fence));
      expect(new Set(fences).size).toBe(fences.length);
    });

    it('a frozen transactional holder: other callers answer contended instead of waiting, and the database ends it after its TTL', async () => {
      const a = action();
      const frozenTtl = 6_000;
      const short = new Runner(h.store, { ttlMs: frozenTtl });
      // The callers' store gives up on a held row sooner than the default, to keep the test short.
      const callers = new PgStore({ pool: h.db.pool, schema: h.db.schema, lockWaitMs: 200 });
      const callerRunner = new Runner(callers, { ttlMs: TTL });
      let inserted!: () => void;
      const insertedOnce = new Promise<void>((resolve) => {
        inserted = resolve;
      });
      let thaw!: () => void;
      const thawed = new Promise<void>((resolve) => {
        thaw = resolve;
      });
      // Frozen after its insert, like a SIGSTOPped or partitioned process: its transaction idles.
      const holder = short
        .executeInTransaction<pg.PoolClient>(a, async (context) => {
          await insert(a.key)(context);
          inserted();
          await thawed;
          return { payload: bytes('late') };
        })
        .catch((error: unknown) => ({ outcome: 'threw', error }));
      try {
        await insertedOnce;
        const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
        /** The answer, or 'still waiting' if it did not come while the holder stays frozen. */
        const within = <T>(answer: Promise<T>) =>
          Promise.race([answer, sleep(frozenTtl / 2).then(() => 'still waiting' as const)]);

        const plain = await within(
          callers.acquire({ key: `${a.key}-plain`, resource: a.resource }, TTL),
        );
        expect(plain).toEqual({ outcome: 'contended', retryAfterMs: 200 });
        const other = { key: `${a.key}-tx`, resource: a.resource };
        const tx = await within(callerRunner.executeInTransaction(other, insert(other.key)));
        expect(tx).toEqual({ outcome: 'contended', retryAfterMs: 200 });

        // Postgres ends the idle holder once its TTL has passed: the resource is granted again.
        let next: Awaited<ReturnType<typeof runner.executeInTransaction>> | undefined;
        for (let i = 0; i < 150 && next?.outcome !== 'applied'; i++) {
          if (i > 0) await sleep(200);
          next = await callerRunner.executeInTransaction(other, insert(other.key));
        }
        expect(next?.outcome).toBe('applied');
        expect(await ledger(other.key)).toHaveLength(1);
      } finally {
        thaw();
      }
      expect((await holder).outcome).not.toBe('applied');
      expect(await ledger(a.key)).toEqual([]);
      expect(await h.store.inspect(a.key)).toBeUndefined();
    }, 60_000);

    it('one fence per resource across both modes: a plain holder taken over by a transactional effect has its late writeFenced refused', async () => {
      const a = action();
      const plain = { key: `${a.key}-plain`, resource: a.resource };
      const held = await h.store.acquire(plain, TTL, { applying: true });
      if (held.outcome !== 'granted') throw new Error(held.outcome);
      // The plain holder pauses past its lease; a transactional effect takes the resource over.
      await h.advance(TTL + 1);
      const taken = await runner.executeInTransaction(a, insert(a.key));
      if (taken.outcome !== 'applied') throw new Error(taken.outcome);
      expect(await h.sink.highestFence(a.resource)).toBe(taken.lease.fence);
      // Back from its pause, the old holder writes with its fence: refused, nothing lands.
      const late = h.sink.writeFenced(a.resource, held.lease.fence, async (tx) => {
        await tx.query('insert into ledger (key, fence, note) values ($1, $2, $3)', [
          plain.key,
          held.lease.fence,
          'late',
        ]);
      });
      await expect(late).rejects.toBeInstanceOf(FenceStaleError);
      expect(await ledger(plain.key)).toEqual([]);

      // On a fresh resource too (no mark yet: under the key-row lease a resource no plain holder
      // or sink has used gets none), and the next plain holder writes past it.
      const b = action();
      const first = await runner.executeInTransaction(b, insert(b.key));
      if (first.outcome !== 'applied') throw new Error(first.outcome);
      expect(await h.sink.highestFence(b.resource)).toBe(
        lease === 'key-row' ? 0 : first.lease.fence,
      );
      const next = await h.store.acquire({ key: `${b.key}-next`, resource: b.resource }, TTL);
      if (next.outcome !== 'granted') throw new Error(next.outcome);
      await h.sink.writeFenced(b.resource, next.lease.fence, async () => {});
      expect(await h.sink.highestFence(b.resource)).toBe(next.lease.fence);
    });

    it('work that changes its session (SET ROLE, search_path) does not hand it to the pool: the next user gets the session as it was', async () => {
      const role = `se_tx_role_${randomBytes(4).toString('hex')}`;
      // A member of the owner's role, so the store's own statements still run as it.
      await h.db.pool.query(`create role ${role} in role current_user`);
      const pool = new pg.Pool({ ...h.db.config, max: 1 });
      pool.on('error', () => {});
      const session = async () =>
        (await pool.query(`select current_user as who, current_setting('search_path') as path`))
          .rows[0];
      try {
        const store = new PgStore({ pool, schema: h.db.schema });
        const before = await session();
        const a = action();
        const done = await new Runner(store, { ttlMs: TTL }).executeInTransaction<pg.PoolClient>(
          a,
          async (context) => {
            const result = await insert(a.key)(context);
            await context.tx.query(`set role ${role}`);
            await context.tx.query('set search_path to pg_catalog');
            return result;
          },
        );
        expect(done.outcome).toBe('applied');
        expect(await ledger(a.key)).toHaveLength(1);
        expect(await session()).toEqual(before);
        // Work that leaves the session alone gives its connection back to the pool, not a new one.
        const backend = async () =>
          (await pool.query('select pg_backend_pid() as pid')).rows[0].pid;
        const kept = await backend();
        const b = action();
        const plain = await new Runner(store, { ttlMs: TTL }).executeInTransaction<pg.PoolClient>(
          b,
          insert(b.key),
        );
        expect(plain.outcome).toBe('applied');
        expect(await backend()).toBe(kept);
      } finally {
        await pool.end();
        await h.db.pool.query(`drop role ${role}`);
      }
    });

    it('kill -9 of the process between the insert and the commit: nothing persists, the retry applies once', async () => {
      const a = action();
      const child = fork(
        CHILD,
        [JSON.stringify({ schema: h.db.schema, ...a, payload: undefined })],
        {
          execArgv: ['--import', 'tsx'],
          stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        },
      );
      const exited = new Promise<NodeJS.Signals | null>((resolve) =>
        child.on('exit', (_code, signal) => resolve(signal)),
      );
      await new Promise<void>((resolve, reject) => {
        child.on('message', (message) => (message === 'inserted' ? resolve() : undefined));
        child.on('error', reject);
        child.on('exit', (code) => reject(new Error(`child exited with ${code} before inserting`)));
      });
      // The row exists inside the child's open transaction, invisible to everyone else.
      expect(await ledger(a.key)).toEqual([]);
      child.kill('SIGKILL');
      expect(await exited).toBe('SIGKILL');

      const plain = { key: a.key, resource: a.resource };
      // The retry waits for the dead backend's rollback (the resource row lock), then applies.
      const retried = await runner.executeInTransaction(plain, insert(a.key, 'retry'));
      expect(retried.outcome).toBe('applied');
      expect((await ledger(a.key)).map((r) => r.note)).toEqual(['retry']);
      expect((await h.store.events(a.key)).map((e) => `${e.from}->${e.to}`)).toEqual([
        'free->done',
      ]);
      const again = await runner.executeInTransaction(plain, insert(a.key, 'again'));
      expect(again.outcome).toBe('replayed');
      expect(await ledger(a.key)).toHaveLength(1);
    });

    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

    it('no fence is issued twice: work that runs ROLLBACK and writes at its fence while another caller waits', async () => {
      const a = action();
      const waiting = new PgStore({ pool: h.db.pool, schema: h.db.schema, lockWaitMs: 10_000 });
      let go!: () => void;
      const released = new Promise<void>((resolve) => {
        go = resolve;
      });
      let granted!: (backend: number) => void;
      const grantedOnce = new Promise<number>((resolve) => {
        granted = resolve;
      });
      const holder = runner.executeInTransaction<pg.PoolClient>(a, async ({ tx, fence }) => {
        granted(await backendOf(tx));
        await released;
        await tx.query('rollback').catch(() => {});
        // What it writes next, at its fence, would commit on its own once the transaction is gone.
        await tx.query('insert into ledger (key, fence, note) values ($1, $2, $3)', [
          a.key,
          fence,
          'after rollback',
        ]);
        return { payload: bytes('claimed') };
      });
      const holderBackend = await grantedOnce;
      const b = { ...action(), resource: a.resource };
      const second = new Runner(waiting, { ttlMs: TTL }).executeInTransaction(b, insert(b.key));
      await someoneWaitsFor(h.db.pool, holderBackend);
      go();
      const [first, next] = await Promise.all([holder, second]);
      expect(first.outcome).toBe('failed');
      if (first.outcome === 'failed') expect(first.error).toBeInstanceOf(TransactionEndedError);
      expect(next.outcome).toBe('applied');
      const { rows } = await h.db.pool.query<{ fence: string }>(
        'select fence from ledger where key in ($1, $2)',
        [a.key, b.key],
      );
      const fences = rows.map((row) => Number(row.fence));
      expect(fences.length).toBeGreaterThan(0);
      expect(new Set(fences).size).toBe(fences.length);
    });

    it('writeFenced inside transactional work is refused at once (TRANSACTION_MISUSE), not deadlocked on the sink mark', async () => {
      const a = action();
      let refused: unknown;
      const done = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await insert(a.key)(context);
        refused = await h.sink
          .writeFenced(a.resource, context.fence, async (tx) => {
            await tx.query('insert into ledger (key, fence, note) values ($1, $2, $3)', [
              a.key,
              context.fence,
              'through the sink',
            ]);
          })
          .then(
            () => 'written',
            (error: unknown) => error,
          );
        throw refused;
      });
      // Refused before it reached the database: a write that waited on the sink mark would end in
      // a lock or deadline error, not this one.
      expect(refused).toMatchObject({ code: 'TRANSACTION_MISUSE', misuse: 'fenced-sink' });
      expect(done.outcome).toBe('failed');
      expect(await ledger(a.key)).toEqual([]);
      // Outside transactional work the sink writes as always.
      const plain = await h.store.acquire({ key: `${a.key}-plain`, resource: a.resource }, TTL);
      if (plain.outcome !== 'granted') throw new Error(plain.outcome);
      await h.sink.writeFenced(a.resource, plain.lease.fence, async () => {});
    });

    it('work that sets statement_timeout = 0 (and no idle timeout) is still ended by its deadline, not by its own end', async () => {
      const ttl = 1_500;
      const short = new Runner(h.store, { ttlMs: ttl });
      for (const stall of ['select pg_sleep(60)', 'idle']) {
        const a = action();
        const stalled = await short.executeInTransaction<pg.PoolClient>(a, async (context) => {
          await context.tx.query(
            'set statement_timeout = 0; set idle_in_transaction_session_timeout = 0',
          );
          await insert(a.key)(context);
          if (stall === 'idle') {
            await sleep(8_000);
            await context.tx.query('select 1');
          } else await context.tx.query(stall);
          return { payload: bytes('late') };
        });
        expect(stalled.outcome, stall).toBe('failed');
        // Ended by the store's deadline (its backend terminated), not by the statement's own end a
        // minute later: a cause, not a stopwatch, so a loaded machine cannot fail it.
        if (stall !== 'idle' && stalled.outcome === 'failed')
          expect(stalled.error, stall).toMatchObject({ code: '57P01' });
        expect(await ledger(a.key), stall).toEqual([]);
        // The resource is free again for the next caller.
        const next = await runner.executeInTransaction(
          { ...action(), resource: a.resource },
          async () => ({ payload: bytes('next') }),
        );
        expect(next.outcome, stall).toBe('applied');
      }
    }, 30_000);

    it('a transactional caller whose TTL is below lockWaitMs behind a held resource answers contended, not STORE_UNAVAILABLE', async () => {
      const a = action();
      let release!: () => void;
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      let granted!: () => void;
      const grantedOnce = new Promise<void>((resolve) => {
        granted = resolve;
      });
      const holder = runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        granted();
        await held;
        return insert(a.key)(context);
      });
      try {
        await grantedOnce;
        const patient = new PgStore({ pool: h.db.pool, schema: h.db.schema, lockWaitMs: 3_000 });
        const other = { ...action(), resource: a.resource };
        const answer = await new Runner(patient, { ttlMs: 1_000 }).executeInTransaction(
          other,
          insert(other.key),
        );
        expect(answer).toEqual({ outcome: 'contended', retryAfterMs: 3_000 });
      } finally {
        release();
      }
      expect((await holder).outcome).toBe('applied');
    });

    it('a serialization failure the work wraps in its own error is retried like an unwrapped one', async () => {
      await h.db.pool.query('create table counter (id int primary key, n int not null)');
      await h.db.pool.query('insert into counter values (1, 0)');
      const a = action();
      let attempts = 0;
      const done = await runner.executeInTransaction<pg.PoolClient>(
        a,
        async (context) => {
          attempts += 1;
          await context.tx.query('select n from counter where id = 1');
          if (attempts === 1) {
            // Another transaction changes the row this one's snapshot read: its update cannot serialize.
            await h.db.pool.query('update counter set n = n + 1 where id = 1');
          }
          try {
            await context.tx.query('update counter set n = n + 10 where id = 1');
          } catch (error) {
            throw new Error('could not book the counter', { cause: error });
          }
          return insert(a.key)(context);
        },
        { isolation: 'repeatable read' },
      );
      expect(attempts).toBe(2);
      expect(done.outcome).toBe('applied');
      expect((await h.db.pool.query('select n from counter')).rows).toEqual([{ n: 11 }]);
      expect(await ledger(a.key)).toHaveLength(1);
    });

    it('set constraints all immediate checks the deferred constraints early, and the commit check still holds', async () => {
      await h.db.pool.query(`create table parent (id int primary key);
      create table child (id int, parent int references parent deferrable initially deferred)`);
      const immediate = 'set constraints all immediate';
      // Valid rows: checked at once, the effect commits.
      const a = action();
      const ok = await runner.executeInTransaction<pg.PoolClient>(a, async (context) => {
        await context.tx.query('insert into child values (1, 1)');
        await context.tx.query('insert into parent values (1)');
        await context.tx.query(immediate);
        return insert(a.key)(context);
      });
      expect(ok.outcome).toBe('applied');
      expect(await ledger(a.key)).toHaveLength(1);
      // A dangling reference is what the early check reports, not the store's commit check.
      const b = action();
      let early: unknown;
      const dangling = await runner.executeInTransaction<pg.PoolClient>(b, async (context) => {
        await insert(b.key)(context);
        await context.tx.query('insert into child values (2, 99)');
        early = await context.tx.query(immediate).catch((error: unknown) => error);
        throw early;
      });
      expect(early).toMatchObject({ code: '23503' });
      expect(dangling.outcome).toBe('failed');
      expect(await ledger(b.key)).toEqual([]);
      // After an early check, a COMMIT around the client is still refused at the commit.
      const c = action();
      let committed: unknown;
      const around = await runner.executeInTransaction<pg.PoolClient>(c, async (context) => {
        await insert(c.key)(context);
        await context.tx.query(immediate);
        committed = await (pg.Client.prototype.query as (text: string) => Promise<unknown>)
          .call(context.tx, 'commit')
          .then(
            () => 'committed',
            (error: unknown) => error,
          );
        return { payload: bytes('claimed') };
      });
      expect(committed).toMatchObject({ code: 'SE021' });
      expect(around.outcome).toBe('failed');
      expect(await ledger(c.key)).toEqual([]);
      expect(await h.store.inspect(c.key)).toBeUndefined();
    });
  },
);
