/**
 * PgStore under real parallelism: 4 OS processes x 8 connections (and x 32 callers, sharing
 * statements), 2,000 keys (500 in `npm test`, through test/support/tier.ts) over 20 resources,
 * TTLs of 50-200 ms, random apply failures and process-wide pauses longer than the TTL (see
 * pg-worker/worker.ts). Every apply writes through PgFencedSink into a ledger whose `seq` records
 * commit order per resource (the sink's fence row is locked until commit, so writes to one
 * resource commit one at a time, in seq order). Afterwards, with every lease expired and swept:
 *
 * - no key applied twice unless declared `safe` (ledger rows per key);
 * - every done key's stored result names its ledger row (writer and fence);
 * - no stale write landed: per resource, ledger fences never go down in commit order;
 * - no key stuck: each ends done, uncertain or free;
 * - no store error: contention is never mistaken for an outage.
 *
 * Also on a database whose default isolation is SERIALIZABLE (the store runs its transactions at
 * READ COMMITTED anyway) and through PgBouncer in transaction pooling mode (no named statements,
 * no session state), with half the keys so the file stays within a shared machine's time.
 *
 * The transactional variant runs the same abuse through Runner.executeInTransaction, the ledger
 * insert on the store's own transaction: every key ends done with exactly one ledger row, none
 * uncertain (a pause, a failure or a lost response before commit rolls the attempt back).
 */
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import type { BatchingMode } from '../support/batching.js';
import { type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import {
  databaseUrl,
  databaseWithDefaultIsolation,
  type FreshSchema,
  freshSchema,
} from '../support/postgres.js';
import { sized } from '../support/tier.js';
import { runReportingWorker } from '../support/worker-process.js';
import { keyOf, type WorkerConfig, type WorkerReport } from './pg-worker/plan.js';

const WORKERS = 4;
const KEYS = sized(500, 2_000);
/** The SERIALIZABLE and PgBouncer runs: half, so the file stays within a shared machine's time. */
const FEWER_KEYS = KEYS / 2;
const RESOURCES = 20;
/**
 * Executes a key may take before it counts as unfinished (a contended one retries after at most
 * 20-30 ms). Runs take a few tens at most (`mostAttempts` in the counts printed).
 */
const ATTEMPTS_PER_KEY = 1_000;
const WORKER = fileURLToPath(new URL('./pg-worker/worker.ts', import.meta.url));

async function ledgerSchema(url = databaseUrl()): Promise<FreshSchema> {
  const db = await freshSchema('pg_concurrency', url);
  await migrate(db.pool, { schema: db.schema });
  await db.pool.query(`create table ledger (
    seq bigint generated always as identity primary key,
    key text not null,
    resource text not null,
    fence bigint not null,
    writer text not null
  )`);
  return db;
}

describe('PgStore concurrency: 4 processes x 8 connections', () => {
  let db: FreshSchema;
  let bouncer: PgBouncer | undefined;
  afterEach(() => db?.drop());
  afterAll(() => bouncer?.stop());

  it('applies at most once, lands no stale write, leaves no key stuck', async () => {
    db = await ledgerSchema();
    const counts = await abuse(db, false);
    expect(counts.applies).toBeGreaterThanOrEqual(KEYS / 2);
    expect(counts.storeErrors).toBe(0);
  }, 180_000);

  it('32 callers per process (4 x 32, calls of one kind sharing statements): the same, 0 store errors', async () => {
    db = await ledgerSchema();
    // 128 callers: one connection each would be more than Postgres's default max_connections of
    // 100, and beside the long tier's other files even 4 x 32 pooled ran out (store errors). They
    // share 8 connections per process, as calls of one kind share statements.
    const counts = await abuse(db, false, {
      lanes: 32,
      connections: 8,
      batching: 'on',
      label: '4 processes x 32 callers',
    });
    expect(counts.applies).toBeGreaterThanOrEqual(KEYS / 2);
    expect(counts.storeErrors).toBe(0);
  }, 180_000);

  it('transactional: applies every key exactly once, none uncertain', async () => {
    db = await ledgerSchema();
    const counts = await abuse(db, true);
    expect(counts.keysDone).toBe(KEYS);
    expect(counts.keysUncertain).toBe(0);
    expect(counts.ledgerRows).toBe(KEYS);
    expect(counts.keysAppliedTwice).toBe(0);
    expect(counts.outcomesUncertain).toBe(0);
  }, 180_000);

  it('on a database whose default isolation is SERIALIZABLE: the same, 0 store errors', async () => {
    const url = await databaseWithDefaultIsolation('serializable');
    db = await ledgerSchema(url);
    const counts = await abuse(db, false, { keys: FEWER_KEYS, url, label: 'serializable default' });
    expect(counts.applies).toBeGreaterThanOrEqual(FEWER_KEYS / 2);
    expect(counts.storeErrors).toBe(0);
  }, 120_000);

  it('through PgBouncer in transaction pooling mode: the same, named statements off', async () => {
    bouncer = await startPgBouncer({ serverConnections: 20 });
    db = await ledgerSchema();
    const counts = await abuse(db, false, {
      keys: FEWER_KEYS,
      url: bouncer.url,
      transactionPooling: true,
      label: 'PgBouncer, transaction pooling',
    });
    expect(counts.applies).toBeGreaterThanOrEqual(FEWER_KEYS / 2);
    expect(counts.storeErrors).toBe(0);
  }, 120_000);
});

/**
 * Runs the workers against `db` (connecting through `url`: the schema's database, or PgBouncer in
 * front of it), checks what must hold in every mode, returns the counts.
 */
async function abuse(
  db: FreshSchema,
  transactional: boolean,
  {
    keys: keyCount = KEYS,
    url = databaseUrl(),
    transactionPooling = false,
    lanes = 8,
    connections = undefined as number | undefined,
    batching = undefined as BatchingMode | undefined,
    label = `transactional: ${transactional}`,
  } = {},
) {
  const started = performance.now();
  const reports = await Promise.all(
    Array.from({ length: WORKERS }, (_, worker) =>
      runReportingWorker<WorkerReport, WorkerConfig>(WORKER, {
        worker,
        seed: 0x9e3779b9 + worker * 7919,
        schema: db.schema,
        databaseUrl: url,
        transactionPooling,
        keys: keyCount,
        resources: RESOURCES,
        lanes,
        ...(connections === undefined ? {} : { connections }),
        batching,
        ttls: [50, 100, 200],
        pauseRate: 0.03,
        failBeforeRate: 0.03,
        failAfterRate: 0.03,
        // A budget of work: on a loaded 2-core machine a budget of 90 s left 197 keys unfinished.
        attemptsPerKey: ATTEMPTS_PER_KEY,
        transactional,
      }),
    ),
  );
  const elapsed = performance.now() - started;
  expect(reports.flatMap((r) => r.unfinished)).toEqual([]);

  // Every lease has run out by now; sweep concludes whatever a frozen worker left behind.
  await new Promise((resolve) => setTimeout(resolve, 250));
  const store = new PgStore({ pool: db.pool, schema: db.schema });
  const swept = await store.sweep();

  const q = async <R>(sql: string): Promise<R[]> => (await db.pool.query(sql)).rows as R[];
  const ledger = await q<{
    seq: string;
    key: string;
    resource: string;
    fence: string;
    writer: string;
  }>('select seq, key, resource, fence, writer from ledger order by seq');
  const keys = await q<{ key: string; state: string; fence: string; result: Buffer | null }>(
    'select key, state, fence, result from keys',
  );

  const writes = new Map<string, typeof ledger>();
  for (const row of ledger) writes.set(row.key, [...(writes.get(row.key) ?? []), row]);

  // No key applied twice unless declared safe.
  const twice: string[] = [];
  for (let i = 0; i < keyCount; i++) {
    const spec = keyOf(i, { resources: RESOURCES });
    if (spec.retrySafety !== 'safe' && (writes.get(spec.key)?.length ?? 0) > 1)
      twice.push(spec.key);
  }
  expect(twice).toEqual([]);

  // Every done key's stored result is its ledger row.
  const mismatched: string[] = [];
  for (const row of keys.filter((k) => k.state === 'done')) {
    const [writer, fence] = new TextDecoder().decode(row.result!).split(':');
    const landed = writes.get(row.key) ?? [];
    const match = landed.some(
      (w) => w.writer === writer && w.fence === fence && fence === row.fence,
    );
    if (!match) mismatched.push(row.key);
  }
  expect(mismatched).toEqual([]);

  // No stale write landed: per resource, fences never go down in commit order.
  const highest = new Map<string, number>();
  const stale: string[] = [];
  for (const row of ledger) {
    const fence = Number(row.fence);
    if (fence < (highest.get(row.resource) ?? 0)) stale.push(`${row.key}@${fence}`);
    highest.set(row.resource, Math.max(fence, highest.get(row.resource) ?? 0));
  }
  expect(stale).toEqual([]);

  // No key stuck.
  expect(keys).toHaveLength(keyCount);
  const byState = new Map<string, number>();
  for (const row of keys) byState.set(row.state, (byState.get(row.state) ?? 0) + 1);
  expect([...byState.keys()].every((s) => ['done', 'uncertain', 'free'].includes(s))).toBe(true);

  const sum = (field: keyof WorkerReport) =>
    reports.reduce((total, r) => total + (r[field] as number), 0);
  const counts = {
    seconds: Number((elapsed / 1000).toFixed(1)),
    keysDone: byState.get('done') ?? 0,
    keysUncertain: byState.get('uncertain') ?? 0,
    keysFree: byState.get('free') ?? 0,
    executes: sum('executes'),
    applies: sum('applies'),
    ledgerRows: ledger.length,
    keysAppliedTwice: [...writes.values()].filter((w) => w.length > 1).length,
    outcomesApplied: sum('applied'),
    outcomesReplayed: sum('replayed'),
    outcomesUncertain: sum('uncertain'),
    contended: sum('contended'),
    failedSafeRetried: sum('failed'),
    staleWritesRejected: sum('staleRejected'),
    pauses: sum('pauses'),
    storeErrors: sum('storeErrors'),
    mostAttempts: Math.max(...reports.map((r) => r.mostAttempts)),
    sweptUncertain: swept.uncertain.length,
    sweptFreed: swept.freed.length,
  };
  console.log(`PgStore concurrency counts (${label})`, counts);
  return counts;
}
