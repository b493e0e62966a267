/**
 * PgFencedSink: the fence check and the write commit together or not at all. Equal fences are
 * legal (one holder writes several times), lower ones are refused with nothing written, and a
 * throwing write rolls back the raised mark too.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FenceStaleError, isNotApplied } from '../../src/core/index.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness('pg_sink', { movableClock: false });
  await h.db.pool.query('create table ledger (resource text, fence bigint, note text)');
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
