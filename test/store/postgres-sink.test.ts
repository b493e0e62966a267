/**
 * PgFencedSink: the fence check and the write commit together or not at all. Equal fences are
 * legal (one holder writes several times), lower ones are refused with nothing written, and a
 * throwing write rolls back the raised mark too.
 */
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FenceStaleError, isNotApplied, Runner } from '../../src/core/index.js';
import { migrate, PgFencedSink } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { freshSchema } from '../support/postgres.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness('pg_sink', { movableClock: false });
  await h.db.pool.query('create table ledger (resource text, fence bigint, note text)');
  // The fences these tests write with, as the schema's store would have issued them: the sink
  // refuses one its store never issued (see the last describe).
  await h.db.pool.query(
    `insert into resources (resource, fence)
     select r, 100 from unnest(array['s1', 's2', 's3', 's4', 's-probe', 's-high']) r`,
  );
});
afterAll(() => h?.close());

const ledger = async (resource: string) =>
  (
    await h.db.pool.query('select fence::int, note from ledger where resource = $1 order by note', [
      resource,
    ])
  ).rows;

const write = (resource: string, fence: number, note: string) =>
  h.sink.writeFenced(resource, fence, async (tx) => {
    await tx.query('insert into ledger values ($1, $2, $3)', [resource, fence, note]);
    return note;
  });

describe('PgFencedSink', () => {
  it('accepts rising and equal fences, refuses a lower one and writes nothing for it', async () => {
    expect(await write('s1', 2, 'a')).toBe('a');
    expect(await write('s1', 2, 'b')).toBe('b');
    await expect(write('s1', 1, 'late')).rejects.toBeInstanceOf(FenceStaleError);
    expect(await write('s1', 5, 'c')).toBe('c');
    await expect(write('s1', 4, 'late again')).rejects.toMatchObject({ code: 'FENCE_STALE' });
    expect(await ledger('s1')).toEqual([
      { fence: 2, note: 'a' },
      { fence: 2, note: 'b' },
      { fence: 5, note: 'c' },
    ]);
    expect(await h.sink.highestFence('s1')).toBe(5);
    expect(await h.sink.highestFence('never-written')).toBe(0);
  });

  it('a throwing write rolls back both its rows and the raised mark, and is rethrown as is', async () => {
    await write('s2', 1, 'first');
    const boom = new Error('downstream refused');
    await expect(
      h.sink.writeFenced('s2', 7, async (tx) => {
        await tx.query("insert into ledger values ('s2', 7, 'doomed')");
        throw boom;
      }),
    ).rejects.toBe(boom);
    // Rolled back before COMMIT: a definite "not applied", the error itself unchanged.
    expect(isNotApplied(boom)).toBe(true);
    expect(await h.sink.highestFence('s2')).toBe(1);
    expect(await ledger('s2')).toEqual([{ fence: 1, note: 'first' }]);
    expect(await write('s2', 2, 'second')).toBe('second');
  });

  it('a failure before COMMIT is marked not applied; after a committed write of the same holder it is not', async () => {
    const missing = await h.sink
      .writeFenced('s4', 1, (tx) => tx.query('insert into no_such_table values (1)'))
      .catch((error: unknown) => error);
    expect(String(missing)).toMatch(/relation "no_such_table" does not exist/);
    expect(isNotApplied(missing)).toBe(true);

    // A statement error caught inside the callback: the server answers COMMIT with ROLLBACK.
    const swallowed = await h.sink
      .writeFenced('s4', 2, async (tx) => {
        await tx.query('insert into no_such_table values (1)').catch(() => {});
      })
      .catch((error: unknown) => error);
    expect(swallowed).toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect(isNotApplied(swallowed)).toBe(true);

    // The same holder (resource and fence) already committed one write: the second failing is
    // not proof that nothing of its apply took effect.
    await write('s4', 3, 'first of two');
    const second = new Error('second write failed');
    await expect(
      h.sink.writeFenced('s4', 3, async () => {
        throw second;
      }),
    ).rejects.toBe(second);
    expect(isNotApplied(second)).toBe(false);
  });

  it('concurrent writers on one resource commit in fence order; stale ones are refused', async () => {
    const fences = Array.from({ length: 30 }, (_, i) => ((i * 7) % 30) + 1);
    const outcomes = await Promise.allSettled(fences.map((f) => write('s3', f, `n${f}`)));
    const landed = (await ledger('s3')).map((r) => r.fence);
    const accepted = outcomes.filter((o) => o.status === 'fulfilled').length;
    expect(landed).toHaveLength(accepted);
    for (const o of outcomes) {
      if (o.status === 'rejected') expect(o.reason).toBeInstanceOf(FenceStaleError);
    }
    expect(await h.sink.highestFence('s3')).toBe(Math.max(...landed));
  });
});

describe('PgFencedSink.readFenced (what a probe reads)', () => {
  it('fences out a paused holder before reading: its late write is refused, the next holder writes', async () => {
    // Holder 1 got fence 1 and paused before writing; the probe reads with fence 2.
    const seen = await h.sink.readFenced(
      's-probe',
      2,
      async (tx) =>
        (await tx.query('select note from ledger where resource = $1', ['s-probe'])).rows,
    );
    expect(seen).toEqual([]);
    await expect(write('s-probe', 1, 'late')).rejects.toBeInstanceOf(FenceStaleError);
    expect(await write('s-probe', 2, 're-run')).toBe('re-run');
    expect(await ledger('s-probe')).toEqual([{ fence: 2, note: 're-run' }]);
  });

  it('never lowers the mark and never refuses a read', async () => {
    await write('s-high', 7, 'x');
    const notes = await h.sink.readFenced('s-high', 3, async (tx) =>
      (await tx.query('select note from ledger where resource = $1', ['s-high'])).rows.map(
        (r) => r.note,
      ),
    );
    expect(notes).toEqual(['x']);
    expect(await h.sink.highestFence('s-high')).toBe(7);
  });
});

describe('a sink on another schema than its store (issue 31)', () => {
  it('refuses a fence its schema never issued, nothing written', async () => {
    const refused = await write('never-issued', 1, 'x').catch((error: unknown) => error);
    expect(refused).toMatchObject({ code: 'STORE_MISCONFIGURED' });
    expect(String(refused)).toMatch(/never issued by the store of schema/);
    expect(isNotApplied(refused)).toBe(true);
    await h.db.pool.query(`update resources set fence = 3 where resource = 's4'`);
    await expect(write('s4', 4, 'beyond')).rejects.toMatchObject({ code: 'STORE_MISCONFIGURED' });
    expect(await ledger('never-issued')).toEqual([]);
    expect(await h.sink.highestFence('never-issued')).toBe(0);
  });

  it('separateDatabase: a sink whose data lives apart from any store checks only its own marks', async () => {
    const downstream = await freshSchema('pg_sink_apart');
    try {
      await migrate(downstream.pool, { schema: downstream.schema, log: () => {} });
      const apart = new PgFencedSink({
        pool: downstream.pool,
        schema: downstream.schema,
        separateDatabase: true,
      });
      expect(await apart.writeFenced('elsewhere', 5, async () => 'written')).toBe('written');
      expect(await apart.highestFence('elsewhere')).toBe(5);
      await expect(apart.writeFenced('elsewhere', 4, async () => {})).rejects.toBeInstanceOf(
        FenceStaleError,
      );
      // The same schema without the option: nobody there issued fence 6.
      const checked = new PgFencedSink({ pool: downstream.pool, schema: downstream.schema });
      await expect(checked.writeFenced('elsewhere', 6, async () => {})).rejects.toMatchObject({
        code: 'STORE_MISCONFIGURED',
      });
      await apart.close();
      await checked.close();
    } finally {
      await downstream.drop();
    }
  });

  it("a paused holder's write at fence 1 through a sink on another schema never lands after a transactional holder's at fence 2", async () => {
    const other = await freshSchema('pg_sink_other');
    try {
      await migrate(other.pool, { schema: other.schema, log: () => {} });
      const stray = new PgFencedSink({ pool: h.db.pool, schema: other.schema });
      const runner = new Runner(h.store, { ttlMs: 10_000 });
      const plain = { key: 'paused-holder', resource: 'split' };
      const held = await h.store.acquire(plain, 200, { applying: true });
      if (held.outcome !== 'granted') throw new Error(held.outcome);
      await new Promise((resolve) => setTimeout(resolve, 400));
      const taken = await runner.executeInTransaction<pg.PoolClient>(
        { key: 'tx-holder', resource: 'split' },
        async ({ tx, fence }) => {
          await tx.query("insert into ledger values ('split', $1, 'tx')", [fence]);
          return { payload: bytes('ok') };
        },
      );
      if (taken.outcome !== 'applied') throw new Error(taken.outcome);
      expect(taken.lease.fence).toBe(held.lease.fence + 1);
      const late = await stray
        .writeFenced('split', held.lease.fence, async (tx) => {
          await tx.query("insert into ledger values ('split', $1, 'late')", [held.lease.fence]);
        })
        .catch((error: unknown) => error);
      expect(late).toMatchObject({ code: 'STORE_MISCONFIGURED' });
      expect(await ledger('split')).toEqual([{ fence: taken.lease.fence, note: 'tx' }]);
      // The sink on the store's schema refuses it as stale.
      await expect(
        h.sink.writeFenced('split', held.lease.fence, async () => {}),
      ).rejects.toBeInstanceOf(FenceStaleError);
      await stray.close();
    } finally {
      await other.drop();
    }
  });
});
