/**
 * migrate(): versioned .sql files applied once, in one transaction, safe when several workers
 * start together; refuses a schema migrated by a newer version or whose applied files changed;
 * upgrades a schema of an earlier release with its rows in place.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Action, Lease } from '../../src/core/index.js';
import { payloadDigest } from '../../src/store/digest.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { listMigrations } from '../../src/store/postgres/migrate.js';
import { bytes } from '../support/bytes.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';

let db: FreshSchema;
beforeAll(async () => {
  db = await freshSchema('pg_migrate');
});
afterAll(() => db?.drop());

describe('migrate', () => {
  it('creates a missing schema even when several workers start at once, then is a no-op', async () => {
    // A schema name that needs quoting, created by migrate itself.
    const schema = `${db.schema} "Weird" ü`;
    try {
      const runs = await Promise.all(Array.from({ length: 6 }, () => migrate(db.pool, { schema })));
      expect(runs.flat()).toEqual(listMigrations().map((m) => m.name));
      expect(await migrate(db.pool, { schema })).toEqual([]);
      const store = new PgStore({ pool: db.pool, schema });
      expect((await store.acquire({ key: 'k', resource: 'r' }, 1_000)).outcome).toBe('granted');
    } finally {
      await db.pool.query(`drop schema if exists "${schema.replaceAll('"', '""')}" cascade`);
    }
  });

  it('refuses a schema with an edited or unknown migration', async () => {
    await migrate(db.pool, { schema: db.schema });
    const { rows } = await db.pool.query('select sha256 from migrations where version = 1');
    await db.pool.query(`update migrations set sha256 = 'edited' where version = 1`);
    await expect(migrate(db.pool, { schema: db.schema })).rejects.toMatchObject({
      code: 'MIGRATION_CONFLICT',
      message: expect.stringMatching(/was changed/),
    });
    await db.pool.query('update migrations set sha256 = $1 where version = 1', [rows[0].sha256]);
    await db.pool.query(
      `insert into migrations (version, name, sha256) values (9999, '9999_future.sql', 'x')`,
    );
    await expect(migrate(db.pool, { schema: db.schema })).rejects.toMatchObject({
      code: 'MIGRATION_CONFLICT',
      message: expect.stringMatching(/migrated by a newer sideeffect \(9999_future\.sql\)/),
    });
  });
});

describe('0002 upgrades a 0.1.0 schema in place', () => {
  /** What migrate() of release 0.1.0 made: 0001_init.sql, recorded, and nothing else. */
  async function schemaOf010(schema: string): Promise<void> {
    const file = new URL('../../src/store/postgres/migrations/0001_init.sql', import.meta.url);
    const sql = await readFile(file, 'utf8');
    const client = await db.pool.connect();
    try {
      await client.query('begin');
      await client.query(`create schema "${schema}"`);
      await client.query(`set local search_path to "${schema}", pg_temp`);
      await client.query(`create table migrations (
         version int primary key, name text not null, sha256 text not null,
         applied_at timestamptz not null default now())`);
      await client.query(sql);
      await client.query(
        `insert into migrations (version, name, sha256) values (1, '0001_init.sql', $1)`,
        [createHash('sha256').update(sql).digest('hex')],
      );
      await client.query('commit');
    } finally {
      client.release();
    }
  }

  it('keeps done, uncertain, held and applying keys, and every one behaves afterwards', async () => {
    const schema = `${db.schema}_010`;
    try {
      await schemaOf010(schema);
      const store = new PgStore({ pool: db.pool, schema });
      // Data written by the 0.1.0 functions, called as a 0.1.0 PgStore called them (the current
      // PgStore sends statements that need the later migrations).
      const noPayload = payloadDigest(new Uint8Array());
      const grant = async (a: Action, ttlMs: number, applying: boolean): Promise<Lease> => {
        const { rows } = await db.pool.query(
          `select * from "${schema}".acquire($1, $2, $3, $4, $5, $6)`,
          [a.key, a.resource, noPayload, a.retrySafety ?? 'unknown', ttlMs, applying],
        );
        if (rows[0].o_outcome !== 'applied') throw new Error(rows[0].o_outcome);
        const expiresAt = Number(rows[0].o_expires_at_ms);
        return { resource: a.resource, fence: Number(rows[0].o_fence), ttlMs, expiresAt };
      };
      const done = { key: 'done', resource: 'r-done' };
      const doneLease = await grant(done, 10_000, true);
      await db.pool.query(`select * from "${schema}".complete($1, $2, $3, $4)`, [
        done.key,
        done.resource,
        doneLease.fence,
        Buffer.from(bytes('paid')),
      ]);
      const uncertain = { key: 'uncertain', resource: 'r-uncertain' };
      const uncertainLease = await grant(uncertain, 10_000, true);
      await db.pool.query(`select "${schema}".mark_uncertain($1, $2, $3, $4)`, [
        uncertain.key,
        uncertain.resource,
        uncertainLease.fence,
        'response lost',
      ]);
      const held = { key: 'held', resource: 'r-held' };
      const heldLease = await grant(held, 10_000, false);
      const dead: Action = { key: 'dead', resource: 'r-dead', retrySafety: 'unknown' };
      await grant(dead, 50, true);

      expect(await migrate(db.pool, { schema })).toEqual(
        listMigrations()
          .filter((m) => m.version > 1)
          .map((m) => m.name),
      );
      await new Promise((resolve) => setTimeout(resolve, 100));

      expect(await store.acquire(done, 10_000)).toEqual({
        outcome: 'replayed',
        result: { payload: bytes('paid') },
      });
      await expect(
        store.resolveUncertain(uncertain.key, { applied: false, reason: 'x', fence: 2 }),
      ).rejects.toMatchObject({ code: 'STALE_VERDICT' });
      expect(
        await store.resolveUncertain(uncertain.key, {
          applied: true,
          result: { payload: bytes('found') },
          reason: 'seen downstream',
          fence: 1,
        }),
      ).toMatchObject({ outcome: 'resolved', applied: true });
      const renewed = await store.renew(held, heldLease, 10_000, { applying: true });
      await store.complete(held, renewed, { payload: bytes('held then done') });
      expect((await store.inspect(held.key))?.state).toBe('done');
      // Granted declaring unknown under 0.1.0: a retry declaring safe must not re-apply it.
      expect(await store.acquire({ ...dead, retrySafety: 'safe' }, 10_000)).toEqual({
        outcome: 'uncertain',
        reason: 'lease lost during apply',
      });
      // A 0.1.0 worker still running during the upgrade calls resolve with five arguments.
      const { rows } = await db.pool.query(
        `select o_outcome from "${schema}".resolve_uncertain('dead', false, null, 'old worker', 'v0.1.0')`,
      );
      expect(rows[0].o_outcome).toBe('resolved');
      expect((await store.acquire(dead, 10_000)).outcome).toBe('granted');
    } finally {
      await db.pool.query(`drop schema if exists "${schema}" cascade`);
    }
  });
});
