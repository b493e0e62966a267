/**
 * The sweep leader's advisory lock: one leader per schema, and only per schema (two schemas whose
 * 32-bit hashtext() collides each get their own), and through PgBouncer a leader that idles holds
 * no snapshot (its open transaction would otherwise pin the xmin horizon, and vacuum with it).
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgStore } from '../../src/store/postgres/index.js';
import { type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import { databaseUrl } from '../support/postgres.js';
import { pgHarness } from './pg-support/harness.js';

let admin: pg.Pool;
beforeAll(() => {
  admin = new pg.Pool({ connectionString: databaseUrl(), max: 5 });
});
afterAll(() => admin.end());

describe('PgStore sweep leader', () => {
  it('two schemas whose names collide in a 32-bit hash each get a leader of their own', async () => {
    // Two names with one hashtext(), found by the birthday bound among a few hundred thousand.
    const { rows } = await admin.query<{ a: string; b: string }>(
      `select min(n) as a, max(n) as b from (
         select 'se_leader_' || i as n, hashtext('se_leader_' || i) as h
           from generate_series(1, 400000) as i) named
       group by h having count(*) > 1 limit 1`,
    );
    const pair = rows[0];
    if (!pair) throw new Error('no hashtext collision among 400,000 names');
    const one = new PgStore({ pool: admin, schema: pair.a });
    const other = new PgStore({ pool: admin, schema: pair.b });
    const [ownerA, ownerB, rival] = [{}, {}, {}];
    try {
      expect(await one.leadSweep(ownerA)).toBe(true);
      expect(await other.leadSweep(ownerB)).toBe(true);
      // Still one leader per schema.
      expect(await new PgStore({ pool: admin, schema: pair.a }).leadSweep(rival)).toBe(false);
    } finally {
      await one.resignSweep(ownerA);
      await other.resignSweep(ownerB);
    }
  });

  describe('through PgBouncer (transaction pooling)', () => {
    let bouncer: PgBouncer;
    beforeAll(async () => {
      bouncer = await startPgBouncer({ serverConnections: 4 });
    });
    afterAll(() => bouncer?.stop());

    it('a leader idling in its pinned transaction holds no snapshot', async () => {
      const h = await pgHarness('pg_leader', {
        via: { url: bouncer.url, transactionPooling: true },
      });
      const owner = {};
      try {
        expect(await h.store.leadSweep(owner)).toBe(true);
        const idle = await admin.query<{ xmin: string | null }>(
          `select backend_xmin::text as xmin from pg_stat_activity
            where state = 'idle in transaction' and query like '%pg_try_advisory_xact_lock%'`,
        );
        expect(idle.rows).toHaveLength(1);
        expect(idle.rows[0]!.xmin).toBeNull();
        // Still leading after a heartbeat, still without a snapshot.
        expect(await h.store.leadSweep(owner)).toBe(true);
      } finally {
        await h.store.resignSweep(owner);
        await h.close();
      }
    });
  });
});
