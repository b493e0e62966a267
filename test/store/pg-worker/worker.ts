/**
 * One OS process of the PgStore concurrency test (test/store/postgres-concurrency.test.ts).
 * Runs the real Runner over PgStore with `LANES` connections, every apply writing through
 * PgFencedSink into the ledger. Abuse on purpose: tiny TTLs, random apply failures (before and
 * after the write), and process-wide pauses longer than the TTL (Atomics.wait blocks the whole
 * event loop, like a GC pause or a frozen VM, so not even the lease renewal runs).
 * Works through every key until it ends (applied, replayed or uncertain), retrying contended and
 * failed ones (up to `attemptsPerKey` executes each), then reports its counts to the parent over IPC. With `transactional`, the ledger
 * insert runs on the store's own transaction (Runner.executeInTransaction) instead of the sink.
 */
import pg from 'pg';
import {
  type Apply,
  FenceStaleError,
  type Result,
  Runner,
  type TransactionContext,
} from '../../../src/core/index.js';
import { PgFencedSink, PgStore } from '../../../src/store/postgres/index.js';
import { batchingOption } from '../../support/batching.js';
import { counted, seededRandom, workThrough } from '../../support/worker-process.js';
import { keyOf, type WorkerConfig, type WorkerReport } from './plan.js';

const config = JSON.parse(process.argv[2]!) as WorkerConfig;
const pool = new pg.Pool({
  connectionString: config.databaseUrl,
  max: config.connections ?? config.lanes,
});
pool.on('error', () => {});
const { schema, transactionPooling } = config;
const store = new PgStore({
  pool,
  schema,
  transactionPooling,
  batching: batchingOption(config.batching),
});
const sink = new PgFencedSink({ pool, schema, transactionPooling });
const runners = config.ttls.map((ttlMs) => new Runner(store, { ttlMs }));
const encoder = new TextEncoder();
const insertLedger = `insert into "${config.schema}".ledger (key, resource, fence, writer) values ($1, $2, $3, $4)`;
const report: WorkerReport = {
  worker: config.worker,
  executes: 0,
  applies: 0,
  applied: 0,
  replayed: 0,
  uncertain: 0,
  contended: 0,
  failed: 0,
  staleRejected: 0,
  pauses: 0,
  storeErrors: 0,
  mostAttempts: 0,
  unfinished: [],
};

const random = seededRandom(config.seed);

const pauseCell = new Int32Array(new SharedArrayBuffer(4));
/** Freezes the whole process: no timers, no I/O, no lease renewal. */
function freeze(ms: number): void {
  report.pauses += 1;
  Atomics.wait(pauseCell, 0, 0, ms);
}

let attempt = 0;
async function runKey(index: number): Promise<boolean> {
  const spec = keyOf(index, config);
  const action = {
    key: spec.key,
    resource: spec.resource,
    payload: encoder.encode(spec.key),
    retrySafety: spec.retrySafety,
  };
  for (let tries = 1; tries <= config.attemptsPerKey; tries++) {
    report.mostAttempts = Math.max(report.mostAttempts, tries);
    const runner = runners[Math.floor(random() * runners.length)]!;
    const ttl = config.ttls[runners.indexOf(runner)]!;
    report.executes += 1;
    const attemptWith = async (
      fence: number,
      write: (writer: string) => Promise<unknown>,
    ): Promise<Result> => {
      report.applies += 1;
      const writer = `w${config.worker}-${++attempt}`;
      const roll = random();
      if (roll < config.pauseRate) freeze(ttl * (1.5 + random() * 1.5));
      else if (roll < config.pauseRate + config.failBeforeRate)
        throw new Error('failed before the write');
      await write(writer);
      if (random() < config.failAfterRate) throw new Error('response lost after the write');
      return { payload: encoder.encode(`${writer}:${fence}`) };
    };
    const throughSink: Apply = ({ lease }) =>
      attemptWith(lease.fence, async (writer) => {
        try {
          await sink.writeFenced(spec.resource, lease.fence, (tx) =>
            tx.query(insertLedger, [spec.key, spec.resource, lease.fence, writer]),
          );
        } catch (error) {
          if (error instanceof FenceStaleError) report.staleRejected += 1;
          throw error;
        }
      });
    const inTransaction = ({ tx, fence }: TransactionContext<pg.PoolClient>) =>
      attemptWith(fence, (writer) =>
        tx.query(insertLedger, [spec.key, spec.resource, fence, writer]),
      );
    const ended = await counted(
      report,
      () =>
        config.transactional
          ? runner.executeInTransaction(action, inTransaction)
          : runner.execute(action, throughSink),
      random,
    );
    if (ended) return true;
  }
  return false;
}

const unfinished = await workThrough(config.keys, config.lanes, random, runKey);
report.unfinished.push(...unfinished.map((index) => keyOf(index, config).key));
await pool.end();
process.send!(report);
