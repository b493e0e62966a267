/**
 * PgStore on an empty, migrated schema whose clock can be moved: the test hook of docs/architecture.md (lease expiry judged by the store's clock).
 * Every store function reads the time from `store_now()`; here it is replaced by one that reads a
 * table, so the clock stands still (like the MemoryStore's injected clock: a loaded machine cannot
 * expire a lease between two statements) and `advance(ms)` moves it. Production schemas never get
 * this function.
 *
 * The schema is migrated once per file and emptied between tests (test/support/migrated-schemas.ts:
 * rows, sequences and the clock put back; a test that changed the schema's catalog gets a new one),
 * so a suite that makes a harness per test does not pay a migration per test.
 */
import pg from 'pg';
import type { Limits } from '../../../src/core/index.js';
import type { RoleKind } from '../../../src/store/postgres/grants.js';
import { migrate, PgFencedSink, PgStore } from '../../../src/store/postgres/index.js';
import type { TransactionalLease } from '../../../src/store/postgres/transactional-lease.js';
import { type BatchingMode, batchingOption } from '../../support/batching.js';
import { leaseMigratedSchema } from '../../support/migrated-schemas.js';
import type { FreshSchema } from '../../support/postgres.js';
import { grantedRole } from '../../support/roles.js';

export interface PgHarness {
  db: FreshSchema;
  store: PgStore;
  sink: PgFencedSink;
  advance(ms: number): Promise<void>;
  close(): Promise<void>;
}

export async function pgHarness(
  prefix: string,
  options: {
    limits?: Partial<Limits>;
    movableClock?: boolean;
    /** The store and sink connect here (e.g. PgBouncer) instead of sharing the schema's pool. */
    via?: { url: string; transactionPooling: boolean };
    /** The database the schema is made in; default the test database. */
    url?: string;
    /**
     * The store and sink connect as a role of this kind, given exactly `grantsScript()`'s grants
     * (a role of its own, dropped by close()); default the test database's superuser.
     */
    role?: RoleKind;
    /** How the store groups its calls; default SIDEEFFECT_TEST_BATCHING's (test/support/batching.ts). */
    batching?: BatchingMode;
    /** What transactional grants hold (migrate()'s transactionalLease); default the schema's. */
    lease?: TransactionalLease;
  } = {},
): Promise<PgHarness> {
  const movableClock = options.movableClock ?? true;
  // SIDEEFFECT_TEST_LEASE=key-row runs every harness of a suite under the key-row lease: the
  // suites written for consecutive fences then show what else differs under it.
  const lease =
    options.lease ?? (process.env.SIDEEFFECT_TEST_LEASE as TransactionalLease | undefined);
  const { db } = await leaseMigratedSchema({
    prefix,
    url: options.url,
    variant: `${movableClock ? 'migrated, movable clock' : 'migrated'}${lease ? `, ${lease} lease` : ''}`,
    prepare: async (fresh) => {
      await migrate(fresh.pool, {
        schema: fresh.schema,
        ...(lease ? { transactionalLease: lease, log: () => {} } : {}),
      });
      if (movableClock) {
        await fresh.pool.query(`
          create table test_clock (at timestamptz not null);
          insert into test_clock values (clock_timestamp());
          create or replace function store_now() returns timestamptz
            language sql volatile set search_path from current
            as $$ select at from test_clock $$;
        `);
      }
    },
    resetSql: movableClock ? 'update test_clock set at = clock_timestamp()' : undefined,
    resetTables: movableClock ? ['test_clock'] : [],
  });
  // Tests kill backends on purpose; an idle connection that dies must not crash the test process.
  db.pool.on('error', () => {});
  const role =
    options.role &&
    (await grantedRole(db, options.role, movableClock ? ['grant select on test_clock'] : []));
  const via =
    (options.via && new pg.Pool({ connectionString: options.via.url, max: 4 })) ||
    (role && new pg.Pool({ connectionString: role.url, max: 4 }));
  via?.on('error', () => {});
  const pool = via ?? db.pool;
  const transactionPooling = options.via?.transactionPooling ?? false;
  const store = new PgStore({
    pool,
    schema: db.schema,
    limits: options.limits,
    transactionPooling,
    batching: batchingOption(options.batching),
  });
  const sink = new PgFencedSink({ pool, schema: db.schema, transactionPooling });
  return {
    db,
    store,
    sink,
    advance: async (ms) => {
      await db.pool.query(`update test_clock set at = at + $1 * interval '1 millisecond'`, [ms]);
    },
    close: async () => {
      await via?.end();
      // Before the schema goes back: its grants must be gone for it to compare clean.
      await role?.drop();
      await db.drop();
    },
  };
}

/** A pool of its own on the harness's schema (for a second session: lock holders, killers). */
export function sidePool(db: FreshSchema): pg.Pool {
  const pool = new pg.Pool({ ...db.config, max: 4 });
  pool.on('error', () => {});
  return pool;
}
