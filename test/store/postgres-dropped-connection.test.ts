/**
 * A connection that dies at the worst moment: the backend's last ReadyForQuery and its FATAL
 * (pg_terminate_backend, a restart, a failover) in ONE socket chunk, delivered by the fault
 * harness's proxy. pg parses both in one `data` event, so every client checked out anywhere must
 * have its `error` listener before any await can yield; otherwise Node throws "Unhandled 'error'
 * event" and the worker process exits (vitest fails this file on any such uncaught error). Each
 * call fails with StoreUnavailableError and writes nothing, or succeeds and drops the connection.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaseLostError, Runner, StoreUnavailableError } from '../../src/core/index.js';
import { migrate, PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { CuttableProxy } from '../faults/proxy.js';
import { batchingOption } from '../support/batching.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';

let db: FreshSchema;
let proxy: CuttableProxy;
let seq = 0;
const unique = (what: string) => `${what}-${++seq}`;

/** A pool of one connection through the proxy, as a worker would have. */
function proxiedPool(): pg.Pool {
  const url = new URL(databaseUrl());
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  const pool = new pg.Pool({ connectionString: url.toString(), max: 1 });
  pool.on('error', () => {});
  return pool;
}

beforeAll(async () => {
  db = await freshSchema('pg_dropped');
  await migrate(db.pool, { schema: db.schema });
  const target = new URL(databaseUrl());
  proxy = new CuttableProxy(target.hostname, Number(target.port || 5432));
  await proxy.listen();
});
afterAll(async () => {
  await proxy?.close();
  await db?.drop();
});

const highestFence = (resource: string) =>
  new PgFencedSink({ pool: db.pool, schema: db.schema }).highestFence(resource);

/** The fences a test writes with, issued as the schema's store would (the sink refuses others). */
const issued = async (resource: string, fence: number) => {
  await db.pool.query('insert into resources (resource, fence) values ($1, $2)', [resource, fence]);
  return resource;
};

describe('ReadyForQuery and FATAL in one chunk', () => {
  it('sink on a new connection: StoreUnavailableError, the write never runs, nothing raised', async () => {
    const pool = proxiedPool();
    try {
      const sink = new PgFencedSink({ pool, schema: db.schema });
      const resource = await issued(unique('sink-new'), 1);
      let ran = false;
      proxy.fatalAfterReady(1);
      await expect(
        sink.writeFenced(resource, 1, async () => {
          ran = true;
        }),
      ).rejects.toBeInstanceOf(StoreUnavailableError);
      expect(ran).toBe(false);
      expect(await highestFence(resource)).toBe(0);
      // The dead connection was discarded: the next call gets a good one.
      await sink.writeFenced(resource, 1, async () => {});
      expect(await highestFence(resource)).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it('sink on a pooled connection: dies right behind its begin, StoreUnavailableError, nothing raised', async () => {
    const pool = proxiedPool();
    try {
      const sink = new PgFencedSink({ pool, schema: db.schema });
      const resource = await issued(unique('sink-pooled'), 2);
      // ReadyForQuery #1 ends the startup, #2-#5 answer begin, raise, the write and commit of the
      // first call; #6 answers the second call's begin and comes with the FATAL.
      proxy.fatalAfterReady(6);
      await sink.writeFenced(resource, 1, async (tx) => tx.query('select 1'));
      let ran = false;
      await expect(
        sink.writeFenced(resource, 2, async () => {
          ran = true;
        }),
      ).rejects.toBeInstanceOf(StoreUnavailableError);
      expect(ran).toBe(false);
      expect(await highestFence(resource)).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it('store on a new connection: StoreUnavailableError, no key written', async () => {
    const pool = proxiedPool();
    try {
      const store = new PgStore({ pool, schema: db.schema, batching: batchingOption() });
      const action = { key: unique('store-new'), resource: unique('r') };
      proxy.fatalAfterReady(1);
      await expect(store.acquire(action, 10_000)).rejects.toBeInstanceOf(StoreUnavailableError);
      const direct = new PgStore({ pool: db.pool, schema: db.schema });
      expect(await direct.inspect(action.key)).toBeUndefined();
      expect((await store.acquire(action, 10_000)).outcome).toBe('granted');
    } finally {
      await pool.end();
    }
  });

  it('store on a pooled connection: the FATAL behind an answered call is heard, that connection dropped', async () => {
    const pool = proxiedPool();
    try {
      const store = new PgStore({ pool, schema: db.schema, batching: batchingOption() });
      const action = { key: unique('store-pooled'), resource: unique('r') };
      // #1 startup, #2 the isolation check, #3 the acquire's answer, sent with the FATAL.
      proxy.fatalAfterReady(3);
      expect((await store.acquire(action, 10_000)).outcome).toBe('granted');
      expect(pool.totalCount).toBe(0);
      expect((await store.inspect(action.key))?.state).toBe('held');
    } finally {
      await pool.end();
    }
  });

  it('migrate on a new connection: fails as StoreUnavailableError, creates nothing', async () => {
    const pool = proxiedPool();
    const schema = `${db.schema}_m`;
    try {
      proxy.fatalAfterReady(1);
      await expect(migrate(pool, { schema })).rejects.toBeInstanceOf(StoreUnavailableError);
      const { rows } = await db.pool.query('select from pg_namespace where nspname = $1', [schema]);
      expect(rows).toHaveLength(0);
    } finally {
      await pool.end();
      await db.pool.query(`drop schema if exists "${schema}" cascade`);
    }
  });

  it('migrate on a pooled connection: dies right behind its begin, fails, creates nothing', async () => {
    const pool = proxiedPool();
    const schema = `${db.schema}_p`;
    try {
      // #1 startup, #2 a first query of the worker's own; #3 answers migrate's begin.
      proxy.fatalAfterReady(3);
      await pool.query('select 1');
      await expect(migrate(pool, { schema })).rejects.toBeInstanceOf(StoreUnavailableError);
      const { rows } = await db.pool.query('select from pg_namespace where nspname = $1', [schema]);
      expect(rows).toHaveLength(0);
    } finally {
      await pool.end();
      await db.pool.query(`drop schema if exists "${schema}" cascade`);
    }
  });
});

describe('a partition that resets nothing', () => {
  it('a holder whose renewals go unanswered is told its lease is lost while the partition lasts', async () => {
    const pool = proxiedPool();
    const partition = { over: false };
    try {
      const runner = new Runner(new PgStore({ pool, schema: db.schema }), { ttlMs: 600 });
      let reason: unknown;
      let overWhenTold: boolean | undefined;
      let cut: Promise<void> | undefined;
      const execution = await runner.execute(
        { key: unique('partitioned'), resource: unique('partitioned-r') },
        async ({ signal }) => {
          cut = proxy.cut(8_000, 'freeze').then(() => {
            partition.over = true;
          });
          reason = await new Promise((resolve) => {
            signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
          });
          overWhenTold = partition.over;
          throw reason;
        },
      );
      await cut;
      // Told while the partition lasted: nothing answered, nothing was reset.
      expect(overWhenTold).toBe(false);
      expect(reason).toBeInstanceOf(LeaseLostError);
      expect((reason as LeaseLostError).cause).toMatchObject({ code: 'STORE_UNAVAILABLE' });
      // Its record of the attempt waited for the store: marked uncertain once it answered.
      expect(execution.outcome).toBe('uncertain');
    } finally {
      await pool.end();
    }
  }, 30_000);
});
