/**
 * The mistakes of a first hour fail at once with the fix in the message: a store schema nobody
 * migrated, a worker pointed at another schema, a schema that loses its tables under a running
 * worker, and a worker without the plugin.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { MigrationConflictError, StoreMisconfiguredError } from '../../src/core/errors.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import {
  REPO_ROOT,
  TEMPORAL_ADDRESS,
  TEMPORAL_NAMESPACE,
  uniqueTaskQueue,
} from '../support/temporal.js';
import { testBundle, waitFor } from '../temporal/harness.js';

let native: NativeConnection;
let connection: Connection;
let client: Client;
let pool: pg.Pool;
const schemas: FreshSchema[] = [];

beforeAll(async () => {
  native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
  connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
  pool = new pg.Pool({ connectionString: databaseUrl(), max: 4 });
});

afterAll(async () => {
  for (const schema of schemas) await schema.drop();
  await pool?.end();
  await connection?.close();
  await native?.close();
});

const charge = defineEffect({ resource: () => 'card:1', apply: async () => ({ id: 'ch_1' }) });

async function workerOn(
  schema: string,
  taskQueue = uniqueTaskQueue('misconfig'),
  store = new PgStore({ pool, schema }),
) {
  return Worker.create({
    connection: native,
    namespace: TEMPORAL_NAMESPACE,
    taskQueue,
    workflowBundle: await testBundle(),
    plugins: [
      new SideEffectPlugin({
        store,
        effects: { charge },
        ttlMs: 5_000,
        client,
        sweepEveryMs: 0,
        searchAttributes: false,
      }),
    ],
  });
}

/** The fix a person needs, with the schema they have to name. */
function expectFix(error: unknown, schema: string) {
  expect(error).toBeInstanceOf(StoreMisconfiguredError);
  expect(error).toMatchObject({ code: 'STORE_MISCONFIGURED', schema });
  const { message } = error as Error;
  expect(message).toContain(`sideeffect migrate --schema ${schema}`);
  expect(message).toContain(`migrate(pool, { schema: '${schema}' })`);
}

describe('a worker on a store schema that is not ready', () => {
  it('no migration run: the worker refuses to start and says to run sideeffect migrate', async () => {
    const empty = await freshSchema('nomig');
    schemas.push(empty);
    const worker = await workerOn(empty.schema);
    const error = await worker.run().catch((failure: unknown) => failure);
    expectFix(error, empty.schema);
    expect((error as Error).message).toMatch(/has no sideeffect tables/);
  });

  it('the wrong schema (migrated one, worker names another): the same refusal, naming the schema it looked in', async () => {
    const migrated = await freshSchema('migrated');
    schemas.push(migrated);
    await migrate(pool, { schema: migrated.schema });
    const wrong = `${migrated.schema}_typo`;
    const error = await (await workerOn(wrong)).run().catch((failure: unknown) => failure);
    expectFix(error, wrong);
    // The store itself says the same at run time, instead of "store unavailable".
    const store = new PgStore({ pool, schema: wrong });
    expectFix(await store.inspect('any').catch((failure: unknown) => failure), wrong);
  });

  it('a schema a newer sideeffect migrated: refused unless its new migrations are declared backward-compatible', async () => {
    const newer = await freshSchema('newer');
    schemas.push(newer);
    await migrate(pool, { schema: newer.schema });
    await pool.query(
      `insert into ${newer.schema}.migration_history (version, name, sha256, backward_compatible)
       values (99, '0099_future.sql', 'x', false)`,
    );
    const refused = await (await workerOn(newer.schema)).run().catch((failure: unknown) => failure);
    expect(refused).toBeInstanceOf(MigrationConflictError);
    expect((refused as Error).message).toMatch(
      /migrated by a newer sideeffect \(0099_future.sql\).*deploy that version of sideeffect/,
    );
    // Declared backward-compatible: a rollback to this version still starts (with a warning).
    await pool.query(
      `update ${newer.schema}.migration_history set backward_compatible = true where version = 99`,
    );
    const worker = await workerOn(newer.schema);
    expect(await worker.runUntil(async () => 'ran')).toBe('ran');
  });

  it('tables gone under a running worker: the effect fails non-retryable with the fix, not "store unavailable" for ever', async () => {
    const db = await freshSchema('gone');
    schemas.push(db);
    await migrate(pool, { schema: db.schema });
    const taskQueue = uniqueTaskQueue('gone');
    const worker = await workerOn(db.schema, taskQueue);
    await worker.runUntil(async () => {
      await pool.query(`drop table ${db.schema}.keys cascade`);
      const handle = await client.workflow.start('guarded', {
        taskQueue,
        workflowId: `${taskQueue}-charge`,
        args: ['charge', { cents: 100 }],
      });
      const failure = await handle.result().catch((error: Error) => error);
      const cause = (failure as { cause?: { cause?: { type?: string; message?: string } } }).cause
        ?.cause;
      expect(cause?.type).toBe('SideEffectStoreMisconfigured');
      expect(cause?.message).toContain(`sideeffect migrate --schema ${db.schema}`);
      const history = await handle.fetchHistory();
      const attempts = history.events?.filter((event) => event.activityTaskStartedEventAttributes);
      expect(attempts?.[0]?.activityTaskStartedEventAttributes?.attempt).toBe(1);
    });
  });
});

/** The test database's URL as `user` (with a password trust never checks), or on `database`. */
function urlAs(user: string, database?: string): string {
  const url = new URL(databaseUrl());
  url.username = user;
  url.password = PASSWORD;
  if (database) url.pathname = `/${database}`;
  return url.toString();
}
const PASSWORD = 'pw-not-to-be-shown';

/**
 * Postgres refusing the worker is a mistake to fix, like a missing schema: the worker stops at
 * start naming host, database and user, never the password. pg_hba.conf trusts 127.0.0.1 here, so
 * a wrong password (28P01) cannot be provoked (test/unit/connection-refusal.test.ts has it); a
 * role that does not exist (28000), a database that does not exist (3D000) and a role without
 * privileges (42501) can.
 */
describe('a worker whose Postgres refuses it', () => {
  const role = `sideeffect_nopriv_${Date.now().toString(36)}`;
  const { hostname, port, pathname } = new URL(databaseUrl());
  const testDatabase = pathname.slice(1);
  const target = (database: string, user: string) =>
    `Postgres at ${hostname}:${port || 5432}, database "${database}", user "${user}"`;

  afterAll(async () => {
    await pool.query(`drop role if exists ${role}`);
  });

  async function refusal(schema: string, url: string) {
    const store = new PgStore({ connectionString: url, schema });
    try {
      const worker = await workerOn(schema, uniqueTaskQueue('refused'), store);
      return await worker.run().then(
        () => undefined,
        (failure: unknown) => failure,
      );
    } finally {
      await store.close();
    }
  }

  function expectRefused(error: unknown, where: string, sqlState: string, fix: RegExp) {
    expect(error).toBeInstanceOf(StoreMisconfiguredError);
    const { message } = error as Error;
    expect(message).toContain(where);
    expect(message).toContain(`SQLSTATE ${sqlState}`);
    expect(message).toMatch(fix);
    expect(message).not.toContain(PASSWORD);
    expect(message).not.toContain('sideeffect migrate --schema');
  }

  it('a user that does not exist (28000)', async () => {
    const error = await refusal('sideeffect', urlAs('no_such_user_h7'));
    expectRefused(error, target(testDatabase, 'no_such_user_h7'), '28000', /check the user name/);
  });

  it('a database that does not exist (3D000)', async () => {
    const error = await refusal('sideeffect', urlAs('postgres', 'no_such_database_h7'));
    expectRefused(error, target('no_such_database_h7', 'postgres'), '3D000', /database name/);
  });

  it('a user without privileges on the schema (42501)', async () => {
    const db = await freshSchema('noprivs');
    schemas.push(db);
    await migrate(pool, { schema: db.schema });
    await pool.query(`create role ${role} login password '${PASSWORD}'`);
    const error = await refusal(db.schema, urlAs(role));
    expectRefused(error, target(testDatabase, role), '42501', /--print-grants ROLE --kind runtime/);
  });
});

describe('a worker without the plugin', () => {
  it('the effect activity is reported "not registered on this Worker"; troubleshooting.md maps that message to the fix', async () => {
    const taskQueue = uniqueTaskQueue('noplugin');
    const worker = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue,
      workflowBundle: await testBundle(),
      activities: { greet: async () => 'hello' },
    });
    await worker.runUntil(async () => {
      const handle = await client.workflow.start('guarded', {
        taskQueue,
        workflowId: `${taskQueue}-charge`,
        args: ['charge', { cents: 100 }],
      });
      const message = await waitFor(async () => {
        const { raw } = await handle.describe();
        return raw.pendingActivities?.[0]?.lastFailure?.message ?? undefined;
      }, 'the pending effect activity to report its failure');
      expect(message).toMatch(/^Activity function charge is not registered on this Worker/);
      await handle.terminate('test done');
    });
    const troubleshooting = readFileSync(path.join(REPO_ROOT, 'docs/troubleshooting.md'), 'utf8');
    const entry = troubleshooting
      .split(/^### /m)
      .find((section) => section.includes('is not registered on this Worker'));
    expect(entry, 'docs/troubleshooting.md has an entry for the SDK message').toBeDefined();
    expect(entry).toContain('new SideEffectPlugin(');
    expect(entry).toMatch(/stays? (in )?`?Scheduled`?/);
  });
});
