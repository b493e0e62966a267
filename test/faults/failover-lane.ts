/**
 * The failover lane (issue 45): plain effects charging a "bank" outside Postgres, transactional
 * effects, and effects writing through a PgFencedSink, driven by in-process workers against a
 * primary with one streaming standby (test/support/replication.ts). At a seeded random point the
 * primary is killed (SIGKILL, every process at once), the standby promoted, and the workers go on
 * against the new primary, every key executed once more (a replay) after it.
 *
 * The workers reach Postgres through an endpoint (proxy.ts) that the lane flips to the standby:
 * the DATABASE_URL switch, as a DNS name, virtual IP or managed endpoint that follows the primary
 * does it. pg (8.23) does not take a libpq multi-host URL with target_session_attrs=read-write
 * (failover.test.ts pins that), so an endpoint is how a pg pool follows a promotion. Flipped
 * early, calls reach the standby while it is still read-only.
 *
 * What it counts per run:
 * - appliedTwice: keys charged twice at the bank, or with two rows in a ledger;
 * - fencesIssuedTwice: one (resource, fence) handed to two grants (a plain effect's lease, or an
 *   acknowledged transactional one);
 * - resultsLost: keys acknowledged (applied or replayed) before the kill that the promoted
 *   standby does not have as done, read before any worker reaches it;
 * - staleWritesLanded: sink writes that landed after one with a higher fence, per resource;
 * - stuckKeys: keys not done when the traffic is over (after a sweep);
 * - clientErrors: what the workers' calls threw or failed with, by code (and the cause's code);
 * - inFlightAtKill: calls under way when the primary died;
 * - noPrimaryMs: from the kill to the first effect applied after it (on the new primary).
 */
import pg from 'pg';
import {
  type Action,
  type Execution,
  KeyConflictError,
  Runner,
  type TransactionContext,
} from '../../src/core/index.js';
import { checkDurability, migrate, PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { bytes } from '../support/bytes.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { startReplicated } from '../support/replication.js';
import { CuttableProxy } from './proxy.js';

const SCHEMA = 'failover';
const TTL_MS = 1_000;
const RESOURCES_PER_KIND = 4;
/** A key's driver gives up after this long: the key then counts as stuck. */
const KEY_DEADLINE_MS = 60_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface FailoverOptions {
  /** The standby is synchronous (synchronous_standby_names, synchronous_commit = on). */
  synchronous: boolean;
  /** Keys driven (each twice: once, and once more as a replay after the failover). */
  keys: number;
  seed: number;
  /**
   * The endpoint is flipped to the standby right at the kill, before its promotion (calls then
   * reach a read-only server for a while); otherwise once it is promoted.
   */
  earlyFlip: boolean;
  /**
   * The sink's data in another database (the shared test Postgres, which does not fail over),
   * with `separateDatabase: true`; otherwise in the store's database.
   */
  separateDatabase: boolean;
  /** Concurrent workers (default 6); the pool has two connections more. */
  workers?: number;
}

export interface FailoverCounts {
  keys: number;
  appliedTwice: number;
  fencesIssuedTwice: number;
  resultsLost: number;
  staleWritesLanded: number;
  stuckKeys: number;
  clientErrors: Record<string, number>;
  inFlightAtKill: number;
  noPrimaryMs: number;
  /** Keys acknowledged before the kill (what resultsLost is out of). */
  ackedBeforeKill: number;
  /** Of appliedTwice: at the bank, in the sink's ledger, in the transactional ledger. */
  twiceBy: { bank: number; sink: number; tx: number };
  /** What a worker's start check said of the primary before the traffic: `ok`, or the error's code. */
  startCheck: string;
}

type Kind = 'plain' | 'sink' | 'tx';

/** mulberry32: a run is replayed from its seed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const LEDGER = `create table ledger (
  seq bigserial primary key, key text not null, resource text not null, fence bigint not null)`;
const INSERT = 'insert into ledger (key, resource, fence) values ($1, $2, $3)';

/** One run: a fresh pair, the traffic, the kill, the promotion, the counts. */
export async function runFailover(options: FailoverOptions): Promise<FailoverCounts> {
  const rand = random(options.seed);
  const workers = options.workers ?? 6;
  const pair = await startReplicated({ synchronous: options.synchronous, maxConnections: 30 });
  let proxy: CuttableProxy | undefined;
  let pool: pg.Pool | undefined;
  let sinkDb: FreshSchema | undefined;
  /** The sink's own pool on the shared test Postgres, kept small (max_connections 100 in CI). */
  let sinkPool: pg.Pool | undefined;
  try {
    const admin = new pg.Pool({ connectionString: pair.primary.url, max: 2 });
    admin.on('error', () => {});
    try {
      await admin.query(`create schema ${SCHEMA}`);
      await migrate(admin, { schema: SCHEMA });
      await admin.query(`set search_path = ${SCHEMA}; ${LEDGER}`);
    } finally {
      await admin.end();
    }
    if (options.separateDatabase) {
      sinkDb = await freshSchema('failover_sink');
      sinkDb.pool.on('error', () => {});
      await migrate(sinkDb.pool, { schema: sinkDb.schema });
      await sinkDb.pool.query(`set search_path = ${sinkDb.schema}; ${LEDGER}`);
      sinkPool = new pg.Pool({ ...sinkDb.config, max: 3 });
      sinkPool.on('error', () => {});
    }
    // Everything the workers write has reached the standby before the traffic starts.
    await pair.caughtUp();
    // The worker's start check on this primary: an asynchronous standby is refused before any
    // effect could be lost (the lane's workers run the store directly, past that check).
    const checkPool = new pg.Pool({ connectionString: pair.primary.url, max: 1 });
    const startCheck = await checkDurability(checkPool)
      .then(() => 'ok')
      .catch((error: { code?: string }) => error.code ?? String(error))
      .finally(() => checkPool.end());

    proxy = new CuttableProxy('127.0.0.1', pair.primary.port);
    const endpoint = new URL(pair.primary.url);
    endpoint.port = String(await proxy.listen());
    pool = new pg.Pool({
      connectionString: endpoint.toString(),
      max: workers + 2,
      connectionTimeoutMillis: 2_000,
      options: `-c search_path=${SCHEMA}`,
    });
    pool.on('error', () => {});
    const store = new PgStore({ pool, schema: SCHEMA, lockWaitMs: 150 });
    const sink = sinkPool
      ? new PgFencedSink({
          pool: sinkPool,
          schema: (sinkDb as FreshSchema).schema,
          separateDatabase: true,
        })
      : new PgFencedSink({ pool, schema: SCHEMA });
    const sinkLedger = sinkDb ? `${sinkDb.schema}.ledger` : `${SCHEMA}.ledger`;
    const sinkQuery = (text: string, values: unknown[]) =>
      (sinkPool ?? (pool as pg.Pool)).query(text, values);
    const runner = new Runner(store, { ttlMs: TTL_MS });

    const bank = new Map<string, number>();
    const grants = new Map<string, number>();
    const grant = (resource: string, fence: number) => {
      const at = `${resource}#${fence}`;
      grants.set(at, (grants.get(at) ?? 0) + 1);
    };
    const clientErrors: Record<string, number> = {};
    /** By the error's code and the first code down its causes (SQLSTATE, errno). */
    const countError = (prefix: string, error: unknown) => {
      const e = error as { code?: unknown; name?: string };
      let under: string | undefined;
      for (let c = (error as { cause?: unknown }).cause; c && !under; ) {
        const { code, cause } = c as { code?: unknown; cause?: unknown };
        if (typeof code === 'string') under = code;
        c = cause;
      }
      // Without a code (pg's "Connection terminated unexpectedly"), the message's start.
      const what = e?.code ?? (error as Error)?.message?.slice(0, 40) ?? 'unknown';
      const code = `${prefix}${String(what)}${under ? `/${under}` : ''}`;
      clientErrors[code] = (clientErrors[code] ?? 0) + 1;
    };

    let killedAt: number | undefined;
    /** The kill or the promotion failed: the workers stop, the run fails. */
    let failoverError: unknown;
    let firstAppliedAfterKill: number | undefined;
    const ackedBeforeKill = new Set<string>();
    let inFlight = 0;
    let started = 0;

    const actionOf = (i: number): { action: Action; kind: Kind } => {
      const kind = (['plain', 'sink', 'tx'] as const)[i % 3]!;
      const key = `k${i}`;
      return {
        kind,
        action: { key, resource: `${kind}-r${i % RESOURCES_PER_KIND}`, payload: bytes(key) },
      };
    };

    const attempt = (action: Action, kind: Kind, pause: number): Promise<Execution> => {
      if (kind === 'tx') {
        return runner.executeInTransaction<pg.PoolClient>(
          action,
          async ({ tx, fence }: TransactionContext<pg.PoolClient>) => {
            await tx.query(INSERT, [action.key, action.resource, fence]);
            await sleep(pause);
            return { payload: bytes(`tx ${fence}`) };
          },
        );
      }
      return runner.execute(action, async ({ lease }) => {
        grant(action.resource, lease.fence);
        await sleep(pause);
        if (kind === 'plain') bank.set(action.key, (bank.get(action.key) ?? 0) + 1);
        else
          await sink.writeFenced(action.resource, lease.fence, async (tx) => {
            await tx.query(INSERT.replace('ledger', sinkLedger), [
              action.key,
              action.resource,
              lease.fence,
            ]);
          });
        return { payload: bytes(`${kind} ${lease.fence}`) };
      });
    };

    /** What a person does with an uncertain key: the truth from the bank or the ledger. */
    const resolve = async (action: Action, kind: Kind) => {
      const record = await store.inspect(action.key);
      if (record?.state !== 'uncertain') return;
      let applied: boolean;
      if (kind === 'plain') applied = (bank.get(action.key) ?? 0) > 0;
      else {
        // Fenced first, so a holder's write in flight cannot land after the read.
        applied = await sink.readFenced(action.resource, record.fence + 1, async (tx) => {
          const found = await tx.query(`select from ${sinkLedger} where key = $1`, [action.key]);
          return (found.rowCount ?? 0) > 0;
        });
      }
      await store
        .resolveUncertain(action.key, {
          applied,
          result: applied ? { payload: bytes('resolved') } : undefined,
          reason: 'failover lane: read from the bank or the ledger',
          by: 'failover-operator',
          fence: record.fence,
        })
        .catch(() => {}); // another worker's verdict came first
    };

    const drive = async (i: number) => {
      const { action, kind } = actionOf(i);
      const pause = 5 + Math.floor(rand() * 40);
      const deadline = Date.now() + KEY_DEADLINE_MS;
      while (Date.now() < deadline && !failoverError) {
        let execution: Execution;
        const startedAt = Date.now();
        inFlight += 1;
        try {
          execution = await attempt(action, kind, pause);
        } catch (error) {
          if (error instanceof KeyConflictError) throw error;
          countError('', error);
          await sleep(50 + rand() * 100);
          continue;
        } finally {
          inFlight -= 1;
        }
        switch (execution.outcome) {
          case 'applied':
          case 'replayed':
            if (execution.outcome === 'applied' && kind === 'tx')
              grant(action.resource, execution.lease.fence);
            // Committed on the primary alone once the standby stopped receiving.
            if (
              execution.outcome === 'applied' &&
              detachedAt !== undefined &&
              startedAt > detachedAt
            )
              ackedAfterDetach += 1;
            // Its answer may be read a moment after the kill: the call's start tells.
            if (killedAt === undefined || startedAt < killedAt) ackedBeforeKill.add(action.key);
            // A replay can be answered by the read-only standby; an apply needs a primary.
            else if (execution.outcome === 'applied') firstAppliedAfterKill ??= Date.now();
            return;
          case 'contended':
            await sleep(Math.min(execution.retryAfterMs, 150));
            break;
          case 'failed':
            countError('failed:', execution.error);
            await sleep(50 + rand() * 100);
            break;
          case 'uncertain':
            await resolve(action, kind).catch((error: unknown) => countError('resolve:', error));
            await sleep(50);
            break;
        }
      }
    };

    // The kill point: after a seeded share (25-60 %) of the first pass started; an async
    // standby is detached a little before, so what commits in between is on the primary only.
    const killAfter = Math.max(2, Math.floor(options.keys * (0.25 + 0.35 * rand())));
    const detachAfter = Math.floor(killAfter * 0.5);
    /** The first pass; the second (every key once more) runs on the promoted standby. */
    const jobs = Array.from({ length: options.keys }, (_, i) => i);
    const replays = [...jobs];
    let detached: Promise<void> | undefined;
    let detachedAt: number | undefined;
    let ackedAfterDetach = 0;
    let inFlightAtKill = 0;
    let resultsLost = 0;
    let failover: Promise<void> | undefined;
    const failOver = async () => {
      if (detached) {
        await detached;
        detachedAt = Date.now();
        // Some keys acknowledged on the primary alone: the loss an async failover brings.
        for (let waited = 0; ackedAfterDetach < 3 && waited < 10_000; waited += 20) await sleep(20);
      }
      await sleep(rand() * 100);
      inFlightAtKill = inFlight;
      await pair.killPrimary();
      killedAt = Date.now();
      const px = proxy as CuttableProxy;
      // The dead primary's port may be handed to another process meanwhile: closed.
      px.retarget(undefined);
      if (options.earlyFlip) {
        px.retarget(pair.standby.port);
        await sleep(1_000 + rand() * 1_000);
        // Closed while the lane reads the promoted standby, before any worker writes there.
        px.retarget(undefined);
      }
      await pair.promote();
      const direct = new pg.Client({ connectionString: pair.standby.url });
      direct.on('error', () => {});
      await direct.connect();
      try {
        const { rows } = await direct.query<{ n: number }>(
          `select count(*)::int as n from unnest($1::text[]) a(key)
            where not exists (select from ${SCHEMA}.keys k where k.key = a.key and k.state = 'done')`,
          [[...ackedBeforeKill]],
        );
        resultsLost = rows[0]?.n ?? 0;
      } finally {
        await direct.end();
      }
      px.retarget(pair.standby.port);
    };

    // Whatever the machine's speed, the kill meets traffic and every key is driven again on the
    // new primary: past the kill point an async run's first pass waits for the detach (so keys
    // commit on the primary alone), a worker out of first-pass keys before the kill replays keys
    // already driven, and the second pass starts once the standby is promoted.
    const traffic = Promise.all(
      Array.from({ length: workers }, async () => {
        for (let job = jobs.shift(); job !== undefined; job = jobs.shift()) {
          started += 1;
          if (!options.synchronous && started === detachAfter) detached = pair.detachStandby();
          if (started === killAfter)
            failover = failOver().catch((error: unknown) => {
              failoverError = error;
              jobs.length = 0; // no promotion: the traffic ends, the run fails below
            });
          while (started > killAfter && detached && detachedAt === undefined && !failoverError)
            await sleep(10);
          await drive(job);
        }
        while (killedAt === undefined && !failoverError) await drive(Math.floor(rand() * started));
        await failover;
        if (failoverError) return;
        for (let job = replays.shift(); job !== undefined; job = replays.shift()) await drive(job);
      }),
    );

    await traffic;
    if (failoverError) throw failoverError;

    // Whatever held a lease is past it: a sweep concludes it, and it counts as stuck.
    await sleep(TTL_MS + 200);
    await store.sweep();
    const all = Array.from({ length: options.keys }, (_, i) => actionOf(i));

    const final = new pg.Client({ connectionString: pair.standby.url });
    final.on('error', () => {});
    await final.connect();
    try {
      const stuck = await final.query<{ n: number }>(
        `select count(*)::int as n from unnest($1::text[]) a(key)
          where not exists (select from ${SCHEMA}.keys k where k.key = a.key and k.state = 'done')`,
        [all.map(({ action }) => action.key)],
      );
      const txTwice = await final.query<{ n: number }>(
        `select count(*)::int as n from (select key from ${SCHEMA}.ledger
          group by key having count(*) > 1) d`,
      );
      const sinkTwice = await sinkQuery(
        `select count(*)::int as n from (select key from ${sinkLedger}
          group by key having count(*) > 1) d`,
        [],
      );
      const stale = await sinkQuery(
        `select count(*)::int as n from (
           select fence, max(fence) over (partition by resource order by seq
             rows between unbounded preceding and 1 preceding) as before
             from ${sinkLedger}) o
          where fence < before`,
        [],
      );
      const bankTwice = [...bank.values()].filter((n) => n > 1).length;
      const twiceBy = {
        bank: bankTwice,
        sink: Number(sinkTwice.rows[0]?.n ?? 0),
        tx: txTwice.rows[0]?.n ?? 0,
      };
      return {
        keys: options.keys,
        appliedTwice: twiceBy.bank + twiceBy.sink + twiceBy.tx,
        fencesIssuedTwice: [...grants.values()].filter((n) => n > 1).length,
        resultsLost,
        staleWritesLanded: Number(stale.rows[0]?.n ?? 0),
        stuckKeys: stuck.rows[0]?.n ?? 0,
        clientErrors,
        inFlightAtKill,
        noPrimaryMs: (firstAppliedAfterKill ?? Date.now()) - (killedAt ?? Date.now()),
        ackedBeforeKill: ackedBeforeKill.size,
        twiceBy,
        startCheck,
      };
    } finally {
      await final.end();
    }
  } finally {
    await pool?.end().catch(() => {});
    await proxy?.close();
    await sinkPool?.end().catch(() => {});
    await sinkDb?.drop().catch(() => {});
    await pair.stop();
  }
}
