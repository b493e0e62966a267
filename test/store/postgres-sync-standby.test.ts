/**
 * A transactional effect's COMMIT waiting for a synchronous standby (issue 45, item 4). Ended
 * while it waits (the store's deadline terminating the backend, or the TTL's statement_timeout
 * cancelling it), Postgres keeps the commit locally, unreplicated: the key read done on a primary
 * whose failover would roll it back, and the cancelled COMMIT even answered success. Now the
 * deadline and the statement cut stand down once the COMMIT is sent: the key stays busy until the
 * standby confirms, then reads done everywhere.
 */
import { inspect } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Execution, Runner } from '../../src/core/index.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type ReplicatedPostgres, startReplicated } from '../support/replication.js';

const SCHEMA = 'sideeffect';
const TTL = 3_000;
/** Past the store's deadline (TTL plus the larger of TTL and its 1 s grace) and the TTL's cut. */
const PAST_DEADLINE_MS = 2 * TTL + 1_000 + 1_500;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let pair: ReplicatedPostgres;
let admin: pg.Pool;
let pool: pg.Pool;

beforeAll(async () => {
  pair = await startReplicated({ synchronous: true });
  admin = new pg.Pool({ connectionString: pair.primary.url, max: 2 });
  await migrate(admin, { schema: SCHEMA });
  await admin.query(`create table ${SCHEMA}.ledger (key text, fence bigint)`);
  pool = new pg.Pool({ connectionString: pair.primary.url, max: 4 });
}, 120_000);
afterAll(async () => {
  await pool?.end();
  await admin?.end();
  await pair?.stop();
});

/** The key's state as the primary shows it to any reader (no row: not committed). */
async function state(url: string, key: string): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ state: string }>(
      `select state from ${SCHEMA}.keys where key = $1`,
      [key],
    );
    return rows[0]?.state;
  } finally {
    await client.end();
  }
}

/** The backend whose COMMIT waits for the standby; fails if the execution ended first. */
async function waitingForStandby(ended: () => unknown): Promise<number> {
  for (;;) {
    if (ended()) throw new Error(`ended before its COMMIT waited: ${inspect(ended())}`);
    const { rows } = await admin.query<{ pid: number }>(
      `select pid from pg_stat_activity where wait_event = 'SyncRep'`,
    );
    if (rows[0]) return rows[0].pid;
    await sleep(50);
  }
}

describe('a transactional COMMIT waiting for a synchronous standby past its TTL', () => {
  it('keeps the key busy, never done, until the standby confirms', async () => {
    const store = new PgStore({ pool, schema: SCHEMA, lockWaitMs: 200 });
    const runner = new Runner(store, { ttlMs: TTL });
    const action = { key: 'booking-1', resource: 'room-7' };

    // The standby stops confirming: the grant and the work run, the COMMIT waits.
    await pair.detachStandby();
    let settled: Execution | { thrown: unknown } | undefined;
    const execution = runner
      .executeInTransaction<pg.PoolClient>(action, async ({ tx, fence }) => {
        await tx.query(`insert into ${SCHEMA}.ledger values ($1, $2)`, [action.key, fence]);
        return { payload: bytes('booked') };
      })
      .then(
        (done) => {
          settled = done;
          return done;
        },
        (thrown: unknown) => {
          settled = { thrown };
          throw thrown;
        },
      );
    const waiting = await waitingForStandby(() => settled);

    await sleep(PAST_DEADLINE_MS);
    expect(settled).toBeUndefined();
    expect(await state(pair.primary.url, action.key)).toBeUndefined();
    const { rows } = await admin.query<{ wait_event: string | null }>(
      'select wait_event from pg_stat_activity where pid = $1',
      [waiting],
    );
    expect(rows).toEqual([{ wait_event: 'SyncRep' }]);
    // Busy for everyone else meanwhile: no second grant of the resource.
    expect(await store.acquire({ key: 'booking-2', resource: action.resource }, TTL)).toMatchObject(
      { outcome: 'contended' },
    );

    await pair.attachStandby();
    const done = await execution;
    expect(done).toMatchObject({ outcome: 'applied' });
    expect(await state(pair.primary.url, action.key)).toBe('done');
    await pair.caughtUp();
    expect(await state(pair.standby.url, action.key)).toBe('done');
  }, 120_000);
});
