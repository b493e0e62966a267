/**
 * The key-row lease (migration 0025, issue 47): what a transactional grant holds when the schema
 * is switched, and the switch itself. A transactional grant takes its resource's advisory lock
 * (class 0x53454646), reads the resource row without writing it, and draws its fence from the
 * store's sequence; plain grants take the same lock first, so each mode excludes the other. The
 * switch waits for every transaction that wrote the resources table, and has no way back.
 */
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/core/errors.js';
import {
  FenceStaleError,
  InvalidActionError,
  type Result,
  type TransactionContext,
} from '../../src/core/index.js';
import { payloadDigest } from '../../src/store/digest.js';
import {
  type MigrateOptions,
  migrate,
  migrationStatus,
  PgStore,
} from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { backendOf, someoneWaitsFor } from '../support/lock-waits.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { inTransaction } from '../support/transaction.js';
import { SQL_0_2_0 } from './fixtures/release-0.2.0.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

const TTL = 10_000;
/** The first key-row fence of timeline 1: every one is at least this. */
const KEY_ROW_FENCES = 2 ** 40;
/** resource_lock()'s class: "SEFF" in ASCII, the two-int4 form (docs/guarantees.md). */
const LOCK_CLASS = 0x53454646;

/** A gate a test opens: the work of a transactional holder waits on it. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { wait, open };
}

const ok = async (): Promise<Result> => ({ payload: bytes('ok') });

describe('switching to the key-row lease', () => {
  let db: FreshSchema;
  beforeAll(async () => {
    db = await freshSchema('pg_lease_switch');
  });
  afterAll(() => db?.drop());
  const quiet: MigrateOptions = { log: () => {} };

  it('a new schema takes the resource-row lease; the switch is shown, repeatable, and one way', async () => {
    const schema = `${db.schema}_a`;
    await migrate(db.pool, { schema, ...quiet });
    expect(await migrationStatus(db.pool, { schema })).toMatchObject({
      transactionalLease: 'resource-row',
    });
    await migrate(db.pool, { schema, transactionalLease: 'key-row', ...quiet });
    await migrate(db.pool, { schema, transactionalLease: 'key-row', ...quiet });
    expect(await migrationStatus(db.pool, { schema })).toMatchObject({
      transactionalLease: 'key-row',
    });
    const back = migrate(db.pool, { schema, transactionalLease: 'resource-row', ...quiet });
    await expect(back).rejects.toBeInstanceOf(InvalidActionError);
    await expect(back).rejects.toMatchObject({
      code: 'INVALID_ACTION',
      field: 'transactionalLease',
      message: expect.stringContaining('cannot go back'),
    });
    expect(await migrationStatus(db.pool, { schema })).toMatchObject({
      transactionalLease: 'key-row',
    });
  });

  it('an unknown lease is refused before anything is read', async () => {
    const wrong = migrate(db.pool, {
      schema: `${db.schema}_b`,
      transactionalLease: 'key' as MigrateOptions['transactionalLease'],
    });
    await expect(wrong).rejects.toMatchObject({
      code: 'INVALID_ACTION',
      field: 'transactionalLease',
    });
    expect(await migrationStatus(db.pool, { schema: `${db.schema}_b` })).toMatchObject({
      applied: [],
    });
  });

  it('waits for a transactional holder of the resource-row lease, then switches', async () => {
    const schema = `${db.schema}_c`;
    await migrate(db.pool, { schema, ...quiet });
    const store = new PgStore({ pool: db.pool, schema });
    const held = gate();
    let granted!: () => void;
    const grantedNow = new Promise<void>((resolve) => {
      granted = resolve;
    });
    const holder = store.executeInTransaction(
      { key: 'k1', resource: 'r1', payload: bytes('1') },
      TTL,
      async () => {
        granted();
        await held.wait;
        return { payload: bytes('ok') };
      },
    );
    await grantedNow;
    // Its grant wrote the resource row and holds it (and its lock) until its COMMIT: a key-row
    // grant would not see it, so the switch must not happen under it.
    const early = migrate(db.pool, {
      schema,
      transactionalLease: 'key-row',
      lockTimeoutMs: 200,
      lockRetries: 0,
      ...quiet,
    });
    await expect(early).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(early).rejects.toMatchObject({ cause: { code: '55P03' } });
    expect(await migrationStatus(db.pool, { schema })).toMatchObject({
      transactionalLease: 'resource-row',
    });
    held.open();
    expect((await holder).outcome).toBe('applied');
    await migrate(db.pool, { schema, transactionalLease: 'key-row', ...quiet });
    const next = await store.executeInTransaction(
      { key: 'k2', resource: 'r1', payload: bytes('2') },
      TTL,
      ok,
    );
    expect(next.outcome === 'applied' && next.lease.fence).toBeGreaterThanOrEqual(KEY_ROW_FENCES);
  });
});

describe('PgStore under the key-row lease', () => {
  let h: PgHarness;
  let seq = 0;
  beforeAll(async () => {
    h = await pgHarness('pg_key_row', { lease: 'key-row', batching: 'off' });
  });
  afterAll(() => h?.close());
  const action = (resource?: string) => {
    seq += 1;
    return { key: `k${seq}`, resource: resource ?? `r${seq}`, payload: bytes(`p${seq}`) };
  };
  const resourceRow = async (resource: string) =>
    (
      await h.db.pool.query<{ fence: string; holder: string | null; xmin: string }>(
        'select fence, holder, xmin::text from resources where resource = $1',
        [resource],
      )
    ).rows[0];
  const sinkMark = async (resource: string) =>
    (await h.db.pool.query('select fence from sink_fences where resource = $1', [resource])).rows[0]
      ?.fence;

  it('a transactional effect writes no resource row and no sink mark; its fence is the sequence', async () => {
    const a = action();
    const done = await h.store.executeInTransaction(a, TTL, ok);
    expect(done.outcome).toBe('applied');
    if (done.outcome !== 'applied') return;
    expect(done.lease.fence).toBeGreaterThanOrEqual(KEY_ROW_FENCES);
    expect(await resourceRow(a.resource)).toBeUndefined();
    expect(await sinkMark(a.resource)).toBeUndefined();
    expect(await h.store.inspect(a.key)).toMatchObject({ state: 'done', fence: done.lease.fence });
    const again = await h.store.executeInTransaction(a, TTL, ok);
    expect(again.outcome).toBe('replayed');
  });

  it('plain and transactional grants on one resource: fences rise, the resource row only by plain ones', async () => {
    const resource = `mixed${seq}`;
    const fences: number[] = [];
    for (const mode of ['plain', 'transactional', 'transactional', 'plain', 'transactional']) {
      const a = action(resource);
      if (mode === 'plain') {
        const got = await h.store.acquire(a, TTL);
        if (got.outcome !== 'granted') throw new Error(`not granted: ${got.outcome}`);
        fences.push(got.lease.fence);
        await h.store.complete(a, got.lease, { payload: bytes('ok') });
        expect(Number((await resourceRow(resource))!.fence)).toBe(got.lease.fence);
      } else {
        const before = await resourceRow(resource);
        const done = await h.store.executeInTransaction(a, TTL, ok);
        if (done.outcome !== 'applied') throw new Error(`not applied: ${done.outcome}`);
        fences.push(done.lease.fence);
        expect(await resourceRow(resource)).toEqual(before);
      }
    }
    expect(fences.every((fence, i) => i === 0 || fence > fences[i - 1]!)).toBe(true);
  });

  it('a live plain lease makes the transactional effect contended; an expired one is taken over', async () => {
    const resource = `taken${seq}`;
    const plain = action(resource);
    const got = await h.store.acquire(plain, TTL);
    if (got.outcome !== 'granted') throw new Error(`not granted: ${got.outcome}`);
    let ran = 0;
    const work = async () => {
      ran += 1;
      return { payload: bytes('tx') };
    };
    const tx = action(resource);
    const refused = await h.store.executeInTransaction(tx, TTL, work);
    expect(refused).toMatchObject({ outcome: 'contended' });
    expect(ran).toBe(0);

    await h.advance(TTL + 1);
    const taken = await h.store.executeInTransaction(tx, TTL, work);
    expect(taken.outcome).toBe('applied');
    expect(ran).toBe(1);
    if (taken.outcome !== 'applied') return;
    expect(taken.lease.fence).toBeGreaterThan(got.lease.fence);
    expect(await h.store.inspect(plain.key)).toMatchObject({ state: 'free' });
    expect(await resourceRow(resource)).toMatchObject({ holder: null });
    // The takeover raised the sink mark: the plain holder's late write through the sink is refused.
    expect(Number(await sinkMark(resource))).toBe(taken.lease.fence);
    await expect(
      h.sink.writeFenced(resource, got.lease.fence, async () => 'late'),
    ).rejects.toBeInstanceOf(FenceStaleError);
  });

  it('a live transactional holder holds only its advisory lock; plain and transactional callers are contended', async () => {
    const resource = `busy${seq}`;
    const held = gate();
    let pid!: number;
    let granted!: () => void;
    const grantedNow = new Promise<void>((resolve) => {
      granted = resolve;
    });
    const holder = h.store.executeInTransaction(
      action(resource),
      TTL,
      async ({ tx }: TransactionContext<pg.PoolClient>) => {
        pid = await backendOf(tx);
        granted();
        await held.wait;
        return { payload: bytes('ok') };
      },
    );
    await grantedNow;
    const { rows: locks } = await h.db.pool.query<{ classid: string; objsubid: number }>(
      `select classid::text, objsubid from pg_catalog.pg_locks
        where locktype = 'advisory' and pid = $1 and granted`,
      [pid],
    );
    expect(locks).toContainEqual({ classid: String(LOCK_CLASS), objsubid: 2 });
    expect(await resourceRow(resource)).toBeUndefined();

    const plain = h.store.acquire(action(resource), TTL);
    await someoneWaitsFor(h.db.pool, pid);
    expect(await plain).toMatchObject({ outcome: 'contended' });
    const second = await h.store.executeInTransaction(action(resource), TTL, ok);
    expect(second).toMatchObject({ outcome: 'contended' });
    held.open();
    expect((await holder).outcome).toBe('applied');
    const after = await h.store.acquire(action(resource), TTL);
    expect(after.outcome).toBe('granted');
  });

  it.each(['a resource never used', 'a resource used before'])(
    'at repeatable read, a plain grant committed after the snapshot and before the lock (%s): contended, never run',
    async (which) => {
      const resource = `rr${seq}-${which === 'a resource never used' ? 'new' : 'used'}`;
      if (which === 'a resource used before') {
        const before = action(resource);
        const got = await h.store.acquire(before, TTL);
        if (got.outcome !== 'granted') throw new Error(`not granted: ${got.outcome}`);
        await h.store.complete(before, got.lease, { payload: bytes('ok') });
      }
      // The plain grant, in a transaction of its own: it holds the resource's lock until it commits.
      const client = await h.db.pool.connect();
      try {
        await client.query('begin');
        const plain = (
          await client.query(`select * from acquire($1, $2, $3, 'unknown', $4, false)`, [
            `plain-${resource}`,
            resource,
            payloadDigest(bytes('plain')),
            TTL,
          ])
        ).rows[0];
        expect(plain.o_outcome).toBe('applied');
        let ran = 0;
        const tx = h.store.executeInTransaction(
          action(resource),
          TTL,
          async () => {
            ran += 1;
            return { payload: bytes('tx') };
          },
          { isolation: 'repeatable read' },
        );
        // Its snapshot taken, the transactional grant waits for the lock; then the plain one commits.
        await someoneWaitsFor(h.db.pool, await backendOf(client));
        await client.query('commit');
        expect(await tx).toMatchObject({ outcome: 'contended' });
        expect(ran).toBe(0);
      } finally {
        client.release();
      }
    },
  );

  it("0.3.0's grant and finish (tx_open(), tx_finish()) take the key-row lease too", async () => {
    const digest = payloadDigest(bytes('p'));
    await inTransaction(h.db.pool, async (client) => {
      const opened = (
        await client.query(
          `select * from tx_open('k030', 'r030', $1, '10000ms', '1000ms', current_user::text,
                                 pg_catalog.current_setting('search_path'), false)`,
          [digest],
        )
      ).rows[0];
      expect(opened.o_outcome).toBe('applied');
      expect(Number(opened.o_fence)).toBeGreaterThanOrEqual(KEY_ROW_FENCES);
      expect(await resourceRow('r030')).toBeUndefined();
      // Held by its advisory lock alone: a plain caller of the resource is contended meanwhile.
      expect(await h.store.acquire(action('r030'), TTL)).toMatchObject({ outcome: 'contended' });
      await client.query(
        `select * from tx_finish('k030', 'r030', $1, $2, 'unsafe', '\\x6f6b'::bytea, $3, '10000ms',
                                 '9000ms', current_user::text,
                                 pg_catalog.current_setting('search_path'), false, null, null)`,
        [digest, opened.o_fence, opened.o_xid],
      );
    });
    expect(await h.store.inspect('k030')).toMatchObject({ state: 'done' });
    expect(await resourceRow('r030')).toBeUndefined();
  });

  it("0.2.0's transactional statements keep their resource-row grant, with the store's fences", async () => {
    const s = `"${h.db.schema}"`;
    await inTransaction(h.db.pool, async (client) => {
      const digest = payloadDigest(bytes('p'));
      const granted = (
        await client.query(SQL_0_2_0.txAcquire(s), ['k020', 'r020', digest, '1000ms'])
      ).rows[0];
      // A resource without a row is granted by tx_acquire(), answered as JSON.
      const fence = granted.o_fence ?? granted.o_judged?.o_fence;
      expect(Number(fence)).toBeGreaterThanOrEqual(KEY_ROW_FENCES);
      const recorded = (
        await client.query(SQL_0_2_0.txComplete(s), [
          'k020',
          'r020',
          digest,
          fence,
          'unknown',
          Buffer.from('ok'),
          granted.o_xid,
        ])
      ).rows[0];
      expect(recorded.o_same).toBe(true);
    });
    expect(await h.store.inspect('k020')).toMatchObject({ state: 'done' });
    expect(await resourceRow('r020')).toMatchObject({ holder: null });
  });
});

describe('a shared first look and a grant between its two locks', () => {
  let h: PgHarness;
  beforeAll(async () => {
    h = await pgHarness('pg_batch_lock_order');
  });
  afterAll(async () => {
    await h?.close();
  });

  it('a batch that locked a free row whose advisory lock another grant has answers held at once, and lets go of the row', async () => {
    const resource = 'order-9';
    await h.db.pool.query('insert into resources (resource) values ($1)', [resource]);
    const digest = payloadDigest(bytes('p'));
    // A grant of another session between its two locks: the advisory lock taken, the row not yet.
    const grant = await h.db.pool.connect();
    try {
      await grant.query('begin');
      await grant.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_CLASS, resource]);
      // Two first looks sharing a statement, with a wait long enough for Postgres's deadlock
      // check (deadlock_timeout, 1 s) to be the one that ends a wait for the advisory lock.
      const batch = h.db.pool.query<{ o_ord: number; o_outcome: string }>(
        `select o_ord, o_outcome from acquire_batch(array[1, 2], array['k-1', 'k-2'],
           array[$1, $1], array[$2, $2]::bytea[], array['unsafe', 'unsafe'],
           array[${TTL}, ${TTL}]::bigint[], array[false, false], '3s')`,
        [resource, digest],
      );
      const grantHolder = await backendOf(grant);
      await Promise.race([batch, someoneWaitsFor(h.db.pool, grantHolder)]);
      // The grant goes on to its row: the batch must not hold it while waiting for the grant.
      await grant.query("set local lock_timeout = '2s'");
      await grant.query('select from resources where resource = $1 for update', [resource]);
      const { rows } = await batch;
      expect(rows.map((r) => [r.o_ord, r.o_outcome])).toEqual([
        [1, 'held'],
        [2, 'held'],
      ]);
      await grant.query('commit');
    } finally {
      grant.release();
    }
    const { rows: keys } = await h.db.pool.query('select key from keys where key like $1', ['k-%']);
    expect(keys).toEqual([]);
  });
});
