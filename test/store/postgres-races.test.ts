/**
 * PgStore's single-statement paths (a first acquire, complete) and the transactional grant take no
 * lock before their UPDATE of the resource row, so they can read "no such key" and then find the
 * key committed by the time that row's lock is theirs. Each race is made to happen here: a side
 * session holds the resource row, the caller's statement waits on it, the key is committed, the
 * lock is let go. The answer must be what the functions would have said, with nothing written.
 */
import type pg from 'pg';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { KeyConflictError, Runner } from '../../src/core/index.js';
import { payloadDigest } from '../../src/store/digest.js';
import type { BatchingMode } from '../support/batching.js';
import { bytes, text } from '../support/bytes.js';
import { backendOf, someoneWaitsFor } from '../support/lock-waits.js';
import { type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import { databaseWithDefaultIsolation } from '../support/postgres.js';
import { type PgHarness, pgHarness, sidePool } from './pg-support/harness.js';

const TTL = 10_000;

let bouncer: Promise<PgBouncer> | undefined;
afterAll(async () => {
  await (await bouncer)?.stop();
});

const SETTINGS = [
  ['the default isolation', undefined],
  ['a SERIALIZABLE-default database', 'serializable'],
  ['PgBouncer in transaction pooling', 'pgbouncer'],
] as const;
// Every call through the batch statements (whose keys meet the held row in their own blocks),
// and one statement per call.
const MODES = ['every call', 'off'] as const satisfies BatchingMode[];

describe.each(
  SETTINGS.flatMap(([name, setting]) => MODES.map((mode) => [name, mode, setting] as const)),
)('PgStore single-statement paths under races, on %s, batching %s', (_, batching, setting) => {
  const isolation = setting === 'serializable' ? setting : undefined;
  let h: PgHarness;
  let side: pg.Pool;
  let runner: Runner;
  beforeEach(async () => {
    if (setting === 'pgbouncer') bouncer ??= startPgBouncer({ serverConnections: 6 });
    h = await pgHarness('pg_races', {
      batching,
      url: isolation && (await databaseWithDefaultIsolation(isolation)),
      via:
        setting === 'pgbouncer'
          ? { url: (await bouncer!).url, transactionPooling: true }
          : undefined,
    });
    side = sidePool(h.db);
    runner = new Runner(h.store, { ttlMs: TTL });
    await h.db.pool.query('create table ledger (key text not null, note text not null)');
  });
  afterEach(async () => {
    await side.end();
    await h.close();
  });

  /** A table of the test's schema, named in full: through PgBouncer the session has no search_path. */
  const table = (name: string) => `"${h.db.schema}".${name}`;
  /** A resource row that exists and is free, as after any earlier effect on it. */
  const used = async (resource: string) => {
    const done = await runner.execute({ key: `earlier-${resource}`, resource }, async () => ({
      payload: bytes('earlier'),
    }));
    expect(done.outcome).toBe('applied');
  };
  const fenceOf = async (resource: string) =>
    Number(
      (await h.db.pool.query('select fence from resources where resource = $1', [resource])).rows[0]
        .fence,
    );

  /** Holds the resource row in a side transaction until the returned function commits it. */
  const holdRow = async (resource: string) => {
    const client = await side.connect();
    await client.query('begin');
    await client.query('select from resources where resource = $1 for update', [resource]);
    const pid = await backendOf(client);
    return {
      client,
      pid,
      letGo: async () => {
        await client.query('commit');
        client.release();
      },
    };
  };
  const someoneWaits = (holder: number) => someoneWaitsFor(side, holder);

  it('a first acquire whose key is committed on another resource meanwhile is a KeyConflictError("resource"), nothing written', async () => {
    await used('b');
    const fence = await fenceOf('b');
    const row = await holdRow('b');
    // Settled at once: had it ended before the lock was let go, that is the failure below, not an
    // unhandled rejection.
    const waiting = h.store.acquire({ key: 'k', resource: 'b' }, TTL, { applying: true }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await someoneWaits(row.pid);
    expect(
      (await runner.execute({ key: 'k', resource: 'a' }, async () => ({ payload: bytes('a') })))
        .outcome,
    ).toBe('applied');
    await row.letGo();
    const error = await waiting;
    expect(error).toBeInstanceOf(KeyConflictError);
    expect((error as KeyConflictError).field).toBe('resource');
    expect(await fenceOf('b')).toBe(fence);
    expect((await h.store.inspect('k'))?.resource).toBe('a');
  });

  it('a first acquire whose key is completed on the same resource meanwhile replays it, nothing written', async () => {
    await used('r');
    const fence = await fenceOf('r');
    const row = await holdRow('r');
    const waiting = h.store.acquire({ key: 'k', resource: 'r' }, TTL, { applying: true });
    await someoneWaits(row.pid);
    // What an execution of this key that held the row before us leaves behind.
    await row.client.query(
      `insert into keys (key, resource, digest, state, fence, retry_safety, result, updated_at)
       values ('k', 'r', $1, 'done', $2, 'unknown', $3, store_now())`,
      [payloadDigest(new Uint8Array()), fence + 1, Buffer.from('first')],
    );
    await row.client.query('update resources set fence = fence + 1 where resource = $1', ['r']);
    await row.letGo();
    const answer = await waiting;
    expect(answer.outcome).toBe('replayed');
    if (answer.outcome === 'replayed') expect(text(answer.result.payload)).toBe('first');
    expect(await fenceOf('r')).toBe(fence + 1);
  });

  it('two transactional callers of one key on a used resource: the second waits for the commit and replays, its work never kept', async () => {
    await used('acct');
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let holding!: (backend: number) => void;
    const firstHolds = new Promise<number>((resolve) => {
      holding = resolve;
    });
    const a = { key: 'tx', resource: 'acct' };
    const work =
      (note: string, wait: boolean) =>
      async ({ tx }: { tx: pg.PoolClient }) => {
        await tx.query(`insert into ${table('ledger')} (key, note) values ($1, $2)`, [a.key, note]);
        if (wait) {
          holding(await backendOf(tx));
          await gate;
        }
        return { payload: bytes(note) };
      };
    const first = runner.executeInTransaction<pg.PoolClient>(a, work('first', true));
    const holder = await firstHolds;
    const second = runner.executeInTransaction<pg.PoolClient>(a, work('second', false));
    await someoneWaits(holder);
    release();
    const [one, two] = await Promise.all([first, second]);
    expect(one.outcome).toBe('applied');
    expect(two.outcome).toBe('replayed');
    if (two.outcome === 'replayed') expect(text(two.result.payload)).toBe('first');
    const { rows } = await h.db.pool.query('select note from ledger where key = $1', [a.key]);
    expect(rows.map((r) => r.note)).toEqual(['first']);
  });
  it('a second transactional caller of one key waits for the first commit and replays: the work runs once, even when it would fail on the first commit', async () => {
    await used('acct-u');
    await h.db.pool.query('create table ledger_once (key text primary key)');
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let holding!: (backend: number) => void;
    const firstHolds = new Promise<number>((resolve) => {
      holding = resolve;
    });
    const a = { key: 'tx-once', resource: 'acct-u' };
    let runs = 0;
    const work =
      (wait: boolean) =>
      async ({ tx }: { tx: pg.PoolClient }) => {
        runs += 1;
        // The effect's own table refuses a second row for the key, as a ledger's unique key does.
        await tx.query(`insert into ${table('ledger_once')} (key) values ($1)`, [a.key]);
        if (wait) {
          holding(await backendOf(tx));
          await gate;
        }
        return { payload: bytes(wait ? 'first' : 'second') };
      };
    const first = runner.executeInTransaction<pg.PoolClient>(a, work(true));
    const holder = await firstHolds;
    const second = runner.executeInTransaction<pg.PoolClient>(a, work(false));
    await someoneWaits(holder);
    release();
    const [one, two] = await Promise.all([first, second]);
    expect(one.outcome).toBe('applied');
    expect(two.outcome).toBe('replayed');
    if (two.outcome === 'replayed') expect(text(two.result.payload)).toBe('first');
    expect(runs).toBe(1);
  });
  it.each(['repeatable read', 'serializable'] as const)(
    'at isolation %s: the second caller of one key waits, fails to serialize, runs again and replays; the work is kept once',
    async (isolation) => {
      await used(`acct-${isolation}`);
      let release!: () => void;
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      let holding!: (backend: number) => void;
      const firstHolds = new Promise<number>((resolve) => {
        holding = resolve;
      });
      const a = { key: `tx-${isolation}`, resource: `acct-${isolation}` };
      const seen: string[] = [];
      const work =
        (note: string, wait: boolean) =>
        async ({ tx }: { tx: pg.PoolClient }) => {
          const level = await tx.query(`select current_setting('transaction_isolation') as l`);
          seen.push(level.rows[0].l);
          await tx.query(`insert into ${table('ledger')} (key, note) values ($1, $2)`, [
            a.key,
            note,
          ]);
          if (wait) {
            holding(await backendOf(tx));
            await gate;
          }
          return { payload: bytes(note) };
        };
      const first = runner.executeInTransaction<pg.PoolClient>(a, work('first', true), {
        isolation,
      });
      const holder = await firstHolds;
      const second = runner.executeInTransaction<pg.PoolClient>(a, work('second', false), {
        isolation,
      });
      await someoneWaits(holder);
      release();
      const [one, two] = await Promise.all([first, second]);
      expect(one.outcome).toBe('applied');
      expect(two.outcome).toBe('replayed');
      if (two.outcome === 'replayed') expect(text(two.result.payload)).toBe('first');
      const { rows } = await h.db.pool.query('select note from ledger where key = $1', [a.key]);
      expect(rows.map((r) => r.note)).toEqual(['first']);
      expect(new Set(seen)).toEqual(new Set([isolation]));
    },
  );

  it('the work runs at READ COMMITTED unless asked otherwise, whatever the database default', async () => {
    const { rows } = await h.db.pool.query(`select current_setting('transaction_isolation') as l`);
    let level = '';
    const done = await runner.executeInTransaction<pg.PoolClient>(
      { key: 'tx-level', resource: 'acct-level' },
      async ({ tx }) => {
        level = (await tx.query(`select current_setting('transaction_isolation') as l`)).rows[0].l;
        return { payload: bytes('x') };
      },
    );
    expect(done.outcome).toBe('applied');
    expect(rows[0].l).toBe(isolation ?? 'read committed');
    expect(level).toBe('read committed');
  });
});
