/**
 * One OS process of the exclusive-writes lane (exclusive-writes.test.ts): `callers` concurrent
 * callers on a pool of at most 6 connections, working through every key of the shared plan
 * (every process runs every key, so each is contended), each key plain (Runner.execute, the write
 * through PgFencedSink.writeFenced) or transactional (Runner.executeInTransaction, the write on
 * the store's transaction, at a random isolation level) by its index. Some attempts pause past
 * their TTL before they write
 * (an async pause: the other callers go on), a few after (a transactional holder then holds its
 * uncommitted write until the database ends it); some fail before or after the write. Reports its
 * counts to the parent over IPC.
 */
import pg from 'pg';
import {
  type Apply,
  FenceStaleError,
  type Result,
  Runner,
  type TransactionContext,
} from '../../src/core/index.js';
import { PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { counted, seededRandom, workThrough } from '../support/worker-process.js';
import { type ExclusiveConfig, type ExclusiveReport, exclusiveKey } from './exclusive-plan.js';

const config = JSON.parse(process.argv[2]!) as ExclusiveConfig;
const pool = new pg.Pool({ connectionString: config.databaseUrl, max: config.poolSize });
pool.on('error', () => {});
const store = new PgStore({ pool, schema: config.schema, batching: true });
const sink = new PgFencedSink({ pool, schema: config.schema });
const random = seededRandom(config.seed);
const encoder = new TextEncoder();
const report: ExclusiveReport = {
  worker: config.worker,
  executes: 0,
  applies: 0,
  applied: 0,
  replayed: 0,
  uncertain: 0,
  contended: 0,
  failed: 0,
  staleRejected: 0,
  pausedPastTtl: 0,
  storeErrors: 0,
  unfinished: [],
};
/**
 * The write: `granted_at` is when the grant was made (the caller's), `started_at` defaults to the
 * statement's clock_timestamp(), taken once the holder is exclusive (see the test's header).
 */
const insert = `insert into "${config.schema}".ledger (key, resource, fence, mode, writer, granted_at)
  values ($1, $2, $3, $4, $5, pg_catalog.to_timestamp($6::float8 / 1000))`;
/** A transactional grant holds the resource until its commit: exclusive from the grant on. */
const insertGranted = `insert into "${config.schema}".ledger (key, resource, fence, mode, writer, granted_at)
  values ($1, $2, $3, $4, $5, pg_catalog.clock_timestamp())`;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let attempt = 0;
const ISOLATIONS = ['read committed', 'repeatable read', 'serializable'] as const;

async function runKey(index: number): Promise<boolean> {
  const spec = exclusiveKey(index, config);
  const action = {
    key: spec.key,
    resource: spec.resource,
    payload: encoder.encode(spec.key),
    retrySafety: spec.retrySafety,
  };
  for (let tries = 1; tries <= config.attemptsPerKey; tries++) {
    const ttl = config.ttls[Math.floor(random() * config.ttls.length)]!;
    const runner = new Runner(store, { ttlMs: ttl });
    const writer = `w${config.worker}-${++attempt}`;
    const roll = random();
    const pauseBefore = roll < config.pauseRate;
    const failBefore = !pauseBefore && roll < config.pauseRate + config.failRate;
    const after = random();
    const pauseAfter = after < config.pauseRate / 4;
    const failAfter = !pauseAfter && after < config.pauseRate / 4 + config.failRate;
    const pause = async () => {
      report.pausedPastTtl += 1;
      await sleep(ttl * (1.5 + random() * 1.5));
    };
    const around = async (write: () => Promise<unknown>): Promise<Result> => {
      report.applies += 1;
      if (pauseBefore) await pause();
      if (failBefore) throw new Error('failed before the write');
      await write();
      if (pauseAfter) await pause();
      if (failAfter) throw new Error('response lost after the write');
      return { payload: encoder.encode(writer) };
    };
    const plain: Apply = ({ lease }) =>
      around(async () => {
        try {
          await sink.writeFenced(spec.resource, lease.fence, (tx) =>
            tx.query(insert, [
              spec.key,
              spec.resource,
              lease.fence,
              'plain',
              writer,
              lease.expiresAt - lease.ttlMs,
            ]),
          );
        } catch (error) {
          if (error instanceof FenceStaleError) report.staleRejected += 1;
          throw error;
        }
      });
    const transactional = ({ tx, fence }: TransactionContext<pg.PoolClient>) =>
      around(() =>
        tx.query(insertGranted, [spec.key, spec.resource, fence, 'transactional', writer]),
      );
    // Every isolation level: at the stricter two, a transactional grant's snapshot is older than
    // its lock, which the store must detect.
    const isolation = ISOLATIONS[Math.floor(random() * ISOLATIONS.length)]!;
    report.executes += 1;
    const ended = await counted(
      report,
      () =>
        spec.mode === 'transactional'
          ? runner.executeInTransaction(action, transactional, { isolation })
          : runner.execute(action, plain),
      random,
    );
    if (ended) return true;
  }
  return false;
}

const unfinished = await workThrough(config.keys, config.callers, random, runKey);
report.unfinished.push(...unfinished.map((index) => exclusiveKey(index, config).key));
await pool.end();
process.send!(report);
