/**
 * Migration 0022's fence layout (issue 45): every grant takes the fence after the resource's on
 * the server's timeline, (timeline - 1) * 2^32 at least, so a promoted standby never issues a
 * fence its old primary did. Here, on one server: an upgrade from the 0.3.0 schema while its
 * store keeps granting leaves every resource's fences rising through every grant path, and a
 * fence past 2^53 - 1 is refused with a typed error and nothing granted. The jump itself, across
 * a real promotion: postgres-fence-promotion.test.ts.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FenceExhaustedError, Runner } from '../../src/core/index.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { listMigrations, migrateFiles } from '../../src/store/postgres/migrate.js';
import { bytes } from '../support/bytes.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { type GrantedRole, grantedRole } from '../support/roles.js';

const TTL = 10_000;
const LAST_EXACT = Number.MAX_SAFE_INTEGER;

let db: FreshSchema;
let role: GrantedRole;
let pool: pg.Pool;
let store: PgStore;
let runner: Runner;
let timeline: number;

beforeAll(async () => {
  db = await freshSchema('pg_fence_layout');
  // The schema as 0.3.0 left it: every migration up to 0021.
  await migrateFiles(
    db.pool,
    { schema: db.schema, log: () => {} },
    listMigrations().filter((m) => m.version <= 21),
  );
  await db.pool.query('create table ledger (key text, fence bigint)');
  // The store runs as the documented runtime role: the timeline read must work with its rights.
  role = await grantedRole(db, 'runtime', [`grant insert on ${db.schema}.ledger`]);
  pool = new pg.Pool({ connectionString: role.url, max: 4 });
  store = new PgStore({ pool, schema: db.schema });
  runner = new Runner(store, { ttlMs: TTL });
  const { rows } = await db.pool.query<{ name: string }>(
    'select pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()) as name',
  );
  timeline = Number.parseInt(rows[0]!.name.slice(0, 8), 16);
});
afterAll(async () => {
  await store?.close?.();
  await pool?.end();
  await role?.drop();
  await db?.drop();
});

/** The fence 0022 issues after `current` on this server's timeline. */
const fenceAfter = (current: number) => Math.max(current + 1, (timeline - 1) * 2 ** 32);

async function plainGrant(key: string, resource: string): Promise<number> {
  const granted = await store.acquire({ key, resource }, TTL);
  if (granted.outcome !== 'granted') throw new Error(`${key}: ${granted.outcome}`);
  await store.complete({ key, resource }, granted.lease, { payload: bytes(key) });
  return granted.lease.fence;
}

async function transactionalGrant(key: string, resource: string): Promise<number> {
  const done = await runner.executeInTransaction<pg.PoolClient>(
    { key, resource },
    async ({ tx, fence }) => {
      await tx.query(`insert into ${db.schema}.ledger values ($1, $2)`, [key, fence]);
      return { payload: bytes(key) };
    },
  );
  if (done.outcome !== 'applied') throw new Error(`${key}: ${done.outcome}`);
  return done.lease.fence;
}

/** A transactional grant rolled back: its work tried to end the store's transaction. */
async function rolledBackGrant(key: string, resource: string): Promise<void> {
  const failed = await runner.executeInTransaction<pg.PoolClient>(
    { key, resource },
    async ({ tx }) => {
      await tx.query('rollback');
      return { payload: bytes('claimed') };
    },
  );
  expect(failed).toMatchObject({ outcome: 'failed', error: { code: 'TRANSACTION_ENDED' } });
}

async function resourceFence(resource: string): Promise<number> {
  const { rows } = await db.pool.query<{ fence: string }>(
    'select fence from resources where resource = $1',
    [resource],
  );
  return Number(rows[0]?.fence ?? 0);
}

describe('fences across the upgrade to 0022', () => {
  it('keep rising on every resource and through every grant path', async () => {
    // Before the upgrade only plain grants: this version's transactional path calls functions
    // of later migrations (0023), which a 0.3.0 schema does not have.
    const r: number[] = [];
    r.push(await plainGrant('a1', 'r'));
    r.push(await plainGrant('a2', 'r'));
    r.push(await plainGrant('a4', 'r'));
    const tx = [await plainGrant('b1', 'r-tx')];
    expect(r).toEqual([1, 2, 3]);
    expect(tx).toEqual([1]);

    expect((await migrate(db.pool, { schema: db.schema }))[0]).toBe(
      '0022_fences_above_old_timelines.sql',
    );

    // The same store, unchanged statements, now on the new functions.
    const last = r.at(-1)!;
    r.push(await plainGrant('a5', 'r'));
    expect(r.at(-1)).toBe(fenceAfter(last));
    r.push(await transactionalGrant('a6', 'r'));
    expect(r.at(-1)).toBe(fenceAfter(r.at(-2)!));
    await rolledBackGrant('a7', 'r');
    const rolledBack = await resourceFence('r');
    r.push(await plainGrant('a8', 'r'));
    expect(r.at(-1)).toBe(fenceAfter(rolledBack));
    tx.push(await transactionalGrant('b2', 'r-tx'));
    expect(tx).toEqual([1, fenceAfter(1)]);
    for (let i = 1; i < r.length; i++) expect(r[i]).toBeGreaterThan(r[i - 1]!);
    // First looks sharing a statement (acquire_batch), each a resource's first grant.
    const firsts = await Promise.all(
      ['n1', 'n2', 'n3'].map((n) => plainGrant(`c-${n}`, `new-${n}`)),
    );
    expect(firsts).toEqual([fenceAfter(0), fenceAfter(0), fenceAfter(0)]);
    // A cluster never promoted keeps its sequence: 1, 2, 3...
    if (timeline === 1) expect([r[3], firsts[0]]).toEqual([last + 1, 1]);
  });
});

describe('the burn after a rolled-back transactional grant', () => {
  it('moves the resource to the fence that grant had, once, and to no other', async () => {
    await migrate(db.pool, { schema: db.schema });
    await db.pool.query(`insert into resources (resource, fence) values ('burn', 5)`);
    const client = await db.pool.connect();
    try {
      // A grant rolled back: the row keeps the aborted transaction as its xmax.
      await client.query('begin');
      const { rows } = await client.query<{ fence: string }>(
        `select o_fence as fence from tx_open('k-burn', 'burn', '\\x00', '10s', '1s', current_user, current_setting('search_path'), false)`,
      );
      await client.query('rollback');
      const granted = Number(rows[0]!.fence);
      expect(granted).toBe(fenceAfter(5));
      await client.query('select tx_burn_fence($1, $2)', ['burn', granted + 1]);
      expect(await resourceFence('burn')).toBe(5);
      await client.query('select tx_burn_fence($1, $2)', ['burn', granted]);
      expect(await resourceFence('burn')).toBe(granted);
      // Burnt once: the row now carries no rolled-back grant.
      await client.query('select tx_burn_fence($1, $2)', ['burn', fenceAfter(granted)]);
      expect(await resourceFence('burn')).toBe(granted);
    } finally {
      client.release();
    }
  });
});

describe('the largest exact fence', () => {
  it('is granted, and the grant after it is refused with FenceExhaustedError, nothing granted', async () => {
    await migrate(db.pool, { schema: db.schema });
    await db.pool.query('insert into resources (resource, fence) values ($1, $2), ($3, $2)', [
      'high',
      LAST_EXACT - 1,
      'high-tx',
    ]);
    expect(await plainGrant('h1', 'high')).toBe(LAST_EXACT);
    const refused = store.acquire({ key: 'h2', resource: 'high' }, TTL);
    await expect(refused).rejects.toBeInstanceOf(FenceExhaustedError);
    await expect(refused).rejects.toMatchObject({
      code: 'FENCE_EXHAUSTED',
      cause: { code: 'SE141' },
    });
    expect(await store.inspect('h2')).toBeUndefined();
    expect(await resourceFence('high')).toBe(LAST_EXACT);

    expect(await transactionalGrant('t1', 'high-tx')).toBe(LAST_EXACT);
    const refusedTx = runner.executeInTransaction<pg.PoolClient>(
      { key: 't2', resource: 'high-tx' },
      async () => ({ payload: bytes('never') }),
    );
    await expect(refusedTx).rejects.toBeInstanceOf(FenceExhaustedError);
    expect(await store.inspect('t2')).toBeUndefined();
    expect(await resourceFence('high-tx')).toBe(LAST_EXACT);
  });
});
