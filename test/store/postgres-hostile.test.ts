/**
 * A hostile role beside the store (issue 24, the CVE-2018-1058 class): it plants operators and
 * functions in `public` and in a schema on the store's search_path that match the store's own
 * expressions better than pg_catalog's. Every Store, sink, stats, CLI and migrate operation must
 * still run only pg_catalog's and the store schema's code: not one planted routine may run. On a
 * READ COMMITTED default and on a SERIALIZABLE one (where statements are sent inlined).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Action, Runner } from '../../src/core/index.js';
import { migrate, PgFencedSink, PgStore, storeStats } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { runCli } from '../support/cli.js';
import { type HostileNeighbour, plantHostileNeighbour } from '../support/hostile.js';
import { databaseOfItsOwn, databaseWithDefaultIsolation } from '../support/postgres.js';

// Databases of their own: what is planted in `public` must never reach other test files.
describe.each([
  ['READ COMMITTED', () => databaseOfItsOwn('hostile')],
  ['SERIALIZABLE', () => databaseWithDefaultIsolation('serializable', 'hostile')],
])('a hostile role on the search_path, %s default', (_, url) => {
  let hostile: HostileNeighbour;
  let databaseAt: string;
  const schema = `t_hostile_${randomBytes(4).toString('hex')}`;
  beforeAll(async () => {
    databaseAt = await url();
    hostile = await plantHostileNeighbour(databaseAt);
  });
  afterAll(async () => {
    const admin = new pg.Client({ connectionString: databaseAt });
    await admin.connect();
    await admin.query(`drop schema if exists ${schema} cascade`);
    await admin.end();
    await hostile?.drop();
  });

  it('runs none of its code in migrate, the store, the sink, stats, the durability check or the CLI', async () => {
    expect(hostile.planted).toBeGreaterThan(1000);
    const options = `-c search_path=${hostile.searchPath.replaceAll('"', '').replace(' ', '')}`;
    const pool = new pg.Pool({ connectionString: databaseAt, options, max: 4 });
    pool.on('error', () => {});
    try {
      // The planted objects are in reach: an unqualified expression of the kind the store used
      // to send runs the neighbour's code.
      const client = await pool.connect();
      try {
        await client.query('begin');
        await client.query(`select floor(extract(epoch from now()) * 1000)::bigint`);
        await client.query('rollback');
      } finally {
        client.release();
      }
      const reached = await hostile.hits();
      expect(reached).toBeGreaterThan(0);

      expect((await migrate(pool, { schema })).length).toBeGreaterThan(0);
      expect(await migrate(pool, { schema })).toEqual([]);
      const store = new PgStore({ pool, schema });
      const sink = new PgFencedSink({ pool, schema });
      const runner = new Runner(store, { ttlMs: 10_000 });

      // The plain path: grant, renew into applying, complete, replay, a stale complete.
      const a: Action = { key: 'k-done', resource: 'r-1' };
      const granted = await store.acquire(a, 10_000);
      if (granted.outcome !== 'granted') throw new Error(granted.outcome);
      const lease = await store.renew(a, granted.lease, 10_000, { applying: true });
      await sink.writeFenced(a.resource, lease.fence, async () => {});
      await sink.readFenced(a.resource, lease.fence, async () => {});
      expect(await sink.highestFence(a.resource)).toBe(lease.fence);
      await store.complete(a, lease, { payload: bytes('paid') });
      await store.complete(a, lease, { payload: bytes('paid') });
      expect((await store.acquire(a, 10_000)).outcome).toBe('replayed');
      expect((await runner.execute(a, async () => ({ payload: bytes('x') }))).outcome).toBe(
        'replayed',
      );

      // Contention, uncertainty, reconcile claims, a verdict, a release.
      const u: Action = { key: 'k-uncertain', resource: 'r-2' };
      const held = await store.acquire(u, 10_000, { applying: true });
      if (held.outcome !== 'granted') throw new Error(held.outcome);
      expect((await store.acquire({ key: 'other', resource: 'r-2' }, 10_000)).outcome).toBe(
        'contended',
      );
      await store.markUncertain(u, held.lease, 'response lost');
      expect((await store.claimReconciles({ limit: 10, restartAfterMs: 1_000 })).length).toBe(1);
      expect((await store.claimReconciles({ limit: 10, restartAfterMs: 1_000 })).length).toBe(0);
      expect((await store.list({ state: 'uncertain' })).length).toBe(1);
      expect((await store.list({ oldest: true, limit: 5 })).length).toBeGreaterThan(0);
      expect((await store.uncertainBacklog()).count).toBe(1);
      await store.resolveUncertain(u.key, {
        applied: false,
        reason: 'checked',
        fence: held.lease.fence,
      });
      const r: Action = { key: 'k-released', resource: 'r-3' };
      const leased = await store.acquire(r, 10_000);
      if (leased.outcome !== 'granted') throw new Error(leased.outcome);
      await store.release(r, leased.lease);

      // A lease that runs out: swept, and taken over.
      const dead: Action = { key: 'k-dead', resource: 'r-4' };
      await store.acquire(dead, 1, { applying: true });
      await new Promise((resolve) => setTimeout(resolve, 20));
      await store.sweep();
      const late: Action = { key: 'k-late', resource: 'r-4' };
      await store.acquire(late, 1, { applying: true });
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect((await store.acquire({ key: 'k-taker', resource: 'r-4' }, 10_000)).outcome).toBe(
        'granted',
      );

      // Transactional effects: a grant, and a replay.
      const t: Action = { key: 'k-tx', resource: 'r-5' };
      const work = async () => ({ payload: bytes('in tx') });
      expect((await store.executeInTransaction(t, 10_000, work)).outcome).toBe('applied');
      expect((await store.executeInTransaction(t, 10_000, work)).outcome).toBe('replayed');

      const owner = {};
      expect(await store.leadSweep(owner)).toBe(true);
      expect(await store.leadSweep(owner)).toBe(true);
      await store.resignSweep(owner);
      expect((await store.events(u.key)).length).toBeGreaterThan(0);
      expect((await store.events(a.key)).length).toBeGreaterThan(0);
      expect((await store.events('k-tx')).length).toBe(1);
      expect((await store.inspect(a.key))?.state).toBe('done');
      await storeStats(pool, { schema });
      expect((await store.checkDurability()).mode).toBe('single');

      // The CLI, connecting with the same search_path.
      const cliUrl = new URL(databaseAt);
      cliUrl.searchParams.set('options', options);
      const env = { DATABASE_URL: cliUrl.toString(), SIDEEFFECT_SCHEMA: schema };
      const again = await store.acquire({ key: 'k-cli', resource: 'r-6' }, 10_000, {
        applying: true,
      });
      if (again.outcome !== 'granted') throw new Error(again.outcome);
      await store.markUncertain({ key: 'k-cli', resource: 'r-6' }, again.lease, 'lost');
      for (const args of [
        ['migrate'],
        ['list'],
        ['show', a.key],
        ['stats'],
        [
          'resolve',
          '--any-attempt',
          '--resource',
          'r-6',
          '--not-applied',
          '--reason',
          'checked',
          '--dry-run',
        ],
        [
          'resolve',
          '--any-attempt',
          'k-cli',
          '--store-only',
          '--not-applied',
          '--reason',
          'checked',
        ],
        ['purge', '--older-than', '30d', '--yes'],
        ['doctor'],
      ]) {
        const run = await runCli(args, env);
        expect({ args, code: run.code, stderr: run.stderr }).toMatchObject({ code: 0 });
      }
      await store.purge({ olderThanMs: 1, force: true });
      await store.close();
      await sink.close();
      expect(await hostile.hits()).toBe(reached);
    } finally {
      await pool.end();
    }
  });
});
