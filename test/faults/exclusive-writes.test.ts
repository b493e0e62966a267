/**
 * The exclusive-writes lane (issue 47, item 4), through the public API only, so it proves whatever
 * design excludes holders next: 4 processes x 8 callers (x 32 in the long tier) on 4 resources,
 * pools of 6 connections each (Postgres in CI allows 100), plain effects (execute, the write
 * through PgFencedSink.writeFenced) and transactional ones (executeInTransaction, the write on the
 * store's transaction) mixed on every resource, TTLs of 50-200 ms, some attempts paused past their
 * TTL (see exclusive-worker.ts).
 *
 * Every write that landed is a ledger row carrying its window `[started_at, committed_at)`:
 * `committed_at` is taken by a deferred trigger at the write's COMMIT (before the commit is
 * visible: the true window ends a little later, so no window is made longer than it was), and
 * `started_at` when the holder's first statement ran in the transaction that wrote it. That is
 * where a holder is exclusive, not at its grant:
 *
 * - plain: the grant is only a lease. A holder frozen past it may still write after a successor
 *   was granted, as long as its fence is still the highest the sink has seen (the successor has not
 *   written yet): writeFenced raises the resource's mark row and keeps it locked until its COMMIT,
 *   and only then runs the write. A successor's writeFenced waits for that lock, then is refused if
 *   its fence is lower, or writes after the commit. So two writes that landed never share
 *   `[first statement of the write, commit)`, but their `[grant, commit)` windows may overlap:
 *   the frozen holder wrote, correctly, after its successor's grant. (A plain grant's time is its
 *   lease's start, `expiresAt - ttlMs` by the store's clock, in whole milliseconds and read in
 *   the grant's statement, possibly before it waited for a transactional holder's lock: a
 *   plain/transactional pair in the figure is that, a plain/plain pair mostly the frozen holder);
 * - transactional: the grant locks the resource and raises the same mark in the work's own
 *   transaction, and holds both until its COMMIT: exclusive from the grant on, so its
 *   `[grant, commit)` is taken from the work's first statement too (the grant's own statement is
 *   a round trip earlier; the transaction's start would include its wait for the resource).
 *
 * The windows are copied into a table with an exclusion constraint (btree_gist, `resource with =,
 * during with &&`) in a database of its own (made for the run, dropped after): each overlap of two
 * landed writes on one resource is a refused insert. Asserted: 0 refused inserts, 0 overlapping
 * pairs by a self-join of the ledger, no key applied twice unless declared safe, fences only
 * growing per resource in commit order, no key stuck (each ends done, uncertain or free after a
 * sweep), no key unfinished. Printed: the overlaps of the `[grant, commit)` windows, a figure.
 *
 * Twice: under the resource-row lease, and switched to the key-row lease (migration 0025) while
 * the workers run, once a fifth of the keys have landed a write (`sideeffect migrate
 * --transactional-lease key-row` during a deploy): writes landed under both, fences growing across
 * the switch.
 */
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { sized } from '../support/tier.js';
import { runReportingWorker } from '../support/worker-process.js';
import { type ExclusiveConfig, type ExclusiveReport, exclusiveKey } from './exclusive-plan.js';

const WORKER = fileURLToPath(new URL('./exclusive-worker.ts', import.meta.url));
const PROCESSES = 4;
const CALLERS = sized(8, 32);
const KEYS = sized(160, 800);
const RESOURCES = 4;

interface Landed {
  id: string;
  key: string;
  resource: string;
  fence: string;
  mode: string;
  granted_at: string;
  started_at: string;
  committed_at: string;
}

/** Key-row fences start at timeline * 2^40: above every resource-row fence of this cluster. */
const KEY_ROW_FENCES = 2 ** 40;

describe.each(['resource-row', 'key-row'] as const)(
  'exclusive writes: plain and transactional holders on few resources (%s lease)',
  (lease) => {
    let db: FreshSchema;
    const windowsDb = `sideeffect_test_windows_${randomBytes(4).toString('hex')}`;
    let windows: pg.Pool | undefined;
    const admin = async <T>(run: (client: pg.Client) => Promise<T>): Promise<T> => {
      const client = new pg.Client({ connectionString: databaseUrl() });
      await client.connect();
      try {
        return await run(client);
      } finally {
        await client.end();
      }
    };

    beforeAll(async () => {
      db = await freshSchema(`exclusive_writes_${lease.replace('-', '_')}`);
      await migrate(db.pool, { schema: db.schema });
      const ledger = `"${db.schema}".ledger`;
      await db.pool.query(`
      create table ledger (
        id bigint generated always as identity primary key,
        key text not null,
        resource text not null,
        fence bigint not null,
        mode text not null,
        writer text not null,
        granted_at timestamptz not null,
        started_at timestamptz not null default pg_catalog.clock_timestamp(),
        committed_at timestamptz,
        commit_seq bigint
      );
      create sequence ledger_commit_seq;
      create function ledger_committed() returns trigger language plpgsql as $$
      begin
        update ${ledger} set committed_at = pg_catalog.clock_timestamp(),
               commit_seq = pg_catalog.nextval('"${db.schema}".ledger_commit_seq')
         where id operator(pg_catalog.=) new.id;
        return null;
      end $$;
      create constraint trigger ledger_committed after insert on ledger
        deferrable initially deferred for each row execute function ledger_committed();
    `);
      await admin((client) => client.query(`create database "${windowsDb}"`));
      const url = new URL(databaseUrl());
      url.pathname = `/${windowsDb}`;
      windows = new pg.Pool({ connectionString: url.toString(), max: 2 });
      await windows.query(`
      create extension btree_gist;
      create table windows (
        id bigint primary key,
        resource text not null,
        during tstzrange not null,
        exclude using gist (resource with =, during with &&)
      );
      create table grant_windows (
        id bigint primary key,
        resource text not null,
        during tstzrange not null,
        exclude using gist (resource with =, during with &&)
      );
    `);
    }, 120_000);

    afterAll(async () => {
      await windows?.end();
      await admin((client) => client.query(`drop database if exists "${windowsDb}" with (force)`));
      await db?.drop();
    });

    /** Switches to the key-row lease once a fifth of the keys have landed a write. */
    const switchOnceWritesLand = async (): Promise<void> => {
      for (;;) {
        const { rows } = await db.pool.query<{ n: number }>(
          'select count(*)::int as n from ledger',
        );
        if (rows[0]!.n >= KEYS / 5) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await migrate(db.pool, { schema: db.schema, transactionalLease: 'key-row', log: () => {} });
    };

    it(`${PROCESSES} processes x ${CALLERS} callers: no two landed writes of a resource overlap`, async () => {
      const started = performance.now();
      // The switch, while the workers run: it waits for every transaction that wrote resources.
      const switched = lease === 'key-row' ? switchOnceWritesLand() : Promise.resolve();
      const reports = await Promise.all(
        Array.from({ length: PROCESSES }, (_, worker) =>
          runReportingWorker<ExclusiveReport, ExclusiveConfig>(WORKER, {
            worker,
            seed: 0x5bd1e995 + worker * 7919,
            schema: db.schema,
            databaseUrl: databaseUrl(),
            keys: KEYS,
            resources: RESOURCES,
            callers: CALLERS,
            poolSize: 6,
            ttls: [50, 100, 200],
            pauseRate: 0.05,
            failRate: 0.03,
            attemptsPerKey: 1_000,
          }),
        ),
      );
      const seconds = Number(((performance.now() - started) / 1000).toFixed(1));
      await switched;
      expect(reports.flatMap((r) => r.unfinished)).toEqual([]);

      // Every lease has run out by now; the sweep concludes what a paused holder left behind.
      await new Promise((resolve) => setTimeout(resolve, 250));
      const swept = await new PgStore({ pool: db.pool, schema: db.schema }).sweep();

      const { rows: landed } = await db.pool.query<Landed>(
        `select id, key, resource, fence, mode, granted_at::text, started_at::text, committed_at::text
         from ledger order by resource, commit_seq`,
      );
      expect(landed.length).toBeGreaterThan(0);
      expect(landed.filter((row) => row.committed_at === null)).toEqual([]);

      // The exclusion constraint in a database of its own: each overlap is a row it refuses.
      const copy = async (table: string, from: 'started_at' | 'granted_at') => {
        const { rowCount } = await windows!.query(
          `insert into ${table} (id, resource, during)
           select id, resource, pg_catalog.tstzrange(f, c, '[)')
             from unnest($1::bigint[], $2::text[], $3::timestamptz[], $4::timestamptz[])
               as w(id, resource, f, c)
         on conflict do nothing`,
          [
            landed.map((row) => row.id),
            landed.map((row) => row.resource),
            landed.map((row) => row[from]),
            landed.map((row) => row.committed_at),
          ],
        );
        return landed.length - (rowCount ?? 0);
      };
      const exclusionViolations = await copy('windows', 'started_at');
      const grantWindowsRefused = await copy('grant_windows', 'granted_at');

      // The same by a self-join of the ledger itself.
      const overlapping = async (from: 'started_at' | 'granted_at') =>
        (
          await db.pool.query<{ n: number; modes: string | null }>(
            `select count(*)::int as n,
                  string_agg(distinct a.mode || '/' || b.mode, ', ') as modes
             from ledger a join ledger b
               on a.resource = b.resource and a.id < b.id
              and tstzrange(a.${from}, a.committed_at, '[)') && tstzrange(b.${from}, b.committed_at, '[)')`,
          )
        ).rows[0]!;
      const exclusiveOverlaps = await overlapping('started_at');
      const grantOverlaps = await overlapping('granted_at');

      // No key applied twice unless declared safe.
      const perKey = new Map<string, number>();
      for (const row of landed) perKey.set(row.key, (perKey.get(row.key) ?? 0) + 1);
      const twice: string[] = [];
      for (let i = 0; i < KEYS; i++) {
        const spec = exclusiveKey(i, { resources: RESOURCES });
        const n = perKey.get(spec.key) ?? 0;
        if (n > 1 && (spec.mode === 'transactional' || spec.retrySafety !== 'safe'))
          twice.push(`${spec.key} (${spec.mode}) x${n}`);
      }

      // Fences only grow per resource, in commit order.
      const fencesDown: string[] = [];
      for (let i = 1; i < landed.length; i++) {
        const [before, after] = [landed[i - 1]!, landed[i]!];
        if (before.resource === after.resource && Number(after.fence) <= Number(before.fence))
          fencesDown.push(`${after.resource}: ${before.fence} then ${after.fence}`);
      }

      // Nothing stuck.
      const { rows: states } = await db.pool.query<{ state: string; n: number }>(
        'select state, count(*)::int as n from keys group by state',
      );
      const stuck = states.filter((s) => !['done', 'uncertain', 'free'].includes(s.state));

      const sum = (field: keyof ExclusiveReport) =>
        reports.reduce((total, r) => total + (r[field] as number), 0);
      const keyRowLanded = landed.filter((row) => Number(row.fence) >= KEY_ROW_FENCES).length;
      console.log(
        `exclusive writes (${PROCESSES} x ${CALLERS} callers, ${KEYS} keys, ${lease} lease)`,
        {
          seconds,
          keyRowLanded,
          landed: landed.length,
          landedPlain: landed.filter((row) => row.mode === 'plain').length,
          landedTransactional: landed.filter((row) => row.mode === 'transactional').length,
          exclusionViolations,
          exclusiveOverlapPairs: exclusiveOverlaps.n,
          grantWindowOverlapPairs: grantOverlaps.n,
          grantWindowOverlapModes: grantOverlaps.modes,
          grantWindowsRefused,
          executes: sum('executes'),
          applies: sum('applies'),
          applied: sum('applied'),
          replayed: sum('replayed'),
          uncertain: sum('uncertain'),
          contended: sum('contended'),
          failed: sum('failed'),
          staleRejected: sum('staleRejected'),
          pausedPastTtl: sum('pausedPastTtl'),
          storeErrors: sum('storeErrors'),
          storeErrorSamples: reports.flatMap((r) => r.storeErrorSample ?? []),
          keys: Object.fromEntries(states.map((s) => [s.state, s.n])),
          sweptUncertain: swept.uncertain.length,
          sweptFreed: swept.freed.length,
        },
      );

      expect(exclusionViolations).toBe(0);
      expect(exclusiveOverlaps.n).toBe(0);
      expect(twice).toEqual([]);
      expect(fencesDown).toEqual([]);
      expect(stuck).toEqual([]);
      // Each process ran the whole plan: every key ended in every one of them.
      expect(sum('applied') + sum('replayed') + sum('uncertain')).toBe(PROCESSES * KEYS);
      // The lane did what it is for: paused holders, both modes landing on shared resources.
      expect(sum('pausedPastTtl')).toBeGreaterThan(0);
      expect(landed.some((row) => row.mode === 'plain')).toBe(true);
      expect(landed.some((row) => row.mode === 'transactional')).toBe(true);
      if (lease === 'key-row') {
        // The switch came while writes landed: some before it, transactional ones after it.
        expect(keyRowLanded).toBeLessThan(landed.length);
        expect(
          landed.some((row) => row.mode === 'transactional' && Number(row.fence) >= KEY_ROW_FENCES),
        ).toBe(true);
      } else {
        expect(keyRowLanded).toBe(0);
      }
    }, 300_000);
  },
);
