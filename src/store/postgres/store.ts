import { createHash } from 'node:crypto';
import pg from 'pg';
import {
  ContendedError,
  FenceStaleError,
  InvalidActionError,
  KeyConflictError,
  NotUncertainError,
  OutcomeUncertainError,
  PurgeBelowFloorError,
  StaleVerdictError,
  StoreUnavailableError,
  TransactionEndedError,
  TransactionMisuseError,
  UnexpectedStoreAnswerError,
} from '../../core/errors.js';
import { maskConnectionString } from '../../core/mask.js';
import type { Execution } from '../../core/runner.js';
import {
  type ListFilter,
  TRANSACTION_ISOLATIONS,
  type TransactionalStore,
  type TransactionContext,
  type TransactionIsolation,
  type TransactionOptions,
  type VerdictHolding,
} from '../../core/store.js';
import type {
  Acquisition,
  Action,
  HeldVerdict,
  HeldVerdictState,
  HoldOutcome,
  Key,
  KeyEvent,
  KeyRecord,
  KeyState,
  Lease,
  Resolution,
  ResolveOutcome,
  Result,
  RetrySafety,
  SweepReport,
  UncertainBacklog,
  VerdictJudgement,
} from '../../core/types.js';
import {
  checkAction,
  checkBytes,
  checkLeaseTtl,
  checkPurge,
  checkReason,
  checkResolution,
  checkText,
  checkTtl,
  defaultLimits,
  type Limits,
} from '../../core/validate.js';
import { payloadDigest, transactionalDigest } from '../digest.js';
import { type MigrationStatus, migrationStatus } from './migrate.js';
import {
  checkoutFor,
  isLockNotAvailable,
  isUniqueViolation,
  runStatement,
  type Session,
  storeError,
} from './session.js';
import {
  asBuffer,
  defaultSchema,
  int,
  openPool,
  type PoolOptions,
  plainBytes,
  type Statement,
  statements,
} from './sql.js';
import {
  armDeadline,
  guardedClient,
  knownBaseline,
  POOLED_AFTER_ROLLBACK,
  POOLED_BASELINE,
  POOLED_COUNTS_AT_BEGIN,
  refusedSessionState,
  rememberBaseline,
  resetAfterWork,
  runAsTransactionalWork,
  SESSION_BASELINE,
  SESSION_STATE,
} from './transaction-guard.js';
import { ResourceWaiters, type WaiterPass } from './waiters.js';

/** How a PgStore connects, where its tables are, and which input it refuses. */
export interface PgStoreOptions extends PoolOptions {
  /**
   * The schema `migrate()` was run on.
   * @default `SIDEEFFECT_SCHEMA`, else 'sideeffect'
   */
  schema?: string;
  /**
   * Size limits checked before any statement is sent; unset fields keep their default.
   * @default defaultLimits (key 512 B, resource 256 B, payload and result 1 MiB, reason 4 KiB)
   */
  limits?: Partial<Limits>;
  /**
   * Keys deleted per transaction by `purge`.
   * @default 5_000
   */
  purgeBatchSize?: number;
  /**
   * The share of its wall time a `purge` spends deleting: after each full batch it rests in
   * proportion to how long that batch took (0.25: three times as long), so purging millions of
   * keys leaves the database to the callers most of the time instead of halving their
   * throughput. 1 purges flat out.
   * @default 0.25
   */
  purgeDutyCycle?: number;
  /**
   * The longest an acquire (plain or transactional) waits for a resource row that another
   * transaction holds locked before it answers `contended` with this as its retry delay. A
   * transactional holder keeps its resource's row locked until it commits; without this bound
   * every caller of that resource would wait out a stalled holder, each on a pool connection.
   * The same bound holds `renew`, `complete`, `markUncertain` and `release` of a holder whose
   * resource a transactional grant took over: they throw ContendedError (retryable, nothing
   * written) instead of waiting out that holder's whole transaction.
   * @default 1_000
   */
  lockWaitMs?: number;
  /**
   * How many of this store's acquire calls (plain or transactional) may be in flight at a time
   * for a busy resource: one whose row a call found held by another transaction (a
   * transactional holder holds it for its whole work) within the last `lockWaitMs`. Each caller
   * that waits for that row holds a pool connection for up to `lockWaitMs`; without this bound a
   * few dozen callers of one busy resource held every connection of the pool, and every other
   * resource's calls queued behind them. The others answer `contended` at once, without a pool
   * connection, with a retry delay past the earliest one's wait. On a resource nobody found held,
   * every call goes in (replays, grants, a live lease's `contended` wait for no row), and looks
   * first without waiting; only a call that finds the row held waits, if it gets a place.
   * @default 1
   */
  waitersPerResource?: number;
}

/**
 * The sweep leader's advisory lock key for a schema: 64 bits of a sha-256 of the schema's name, so
 * two schemas on one database do not share a leader (a 32-bit hashtext() collides in a few tens
 * of thousands of names). A single bigint key lives apart from migrate()'s two-int keys.
 */
export function sweepLockKey(schema: string): string {
  return createHash('sha256')
    .update(`sideeffect sweep leader\0${schema}`)
    .digest()
    .readBigInt64BE(0)
    .toString();
}

/** The floor purge_batch() keeps in the schema for every role but the schema's owner (0013). */
const SCHEMA_PURGE_FLOOR_MS = 7 * 24 * 60 * 60 * 1000;
const heldColumns = (s: string) =>
  `id, key, fence, applied, result, reason, actor, identity, state, why, ${s}.epoch_ms(at) as at_ms, ${s}.epoch_ms(judged_at) as judged_at_ms`;

const keyColumns = (s: string) =>
  `key, resource, state, fence, retry_safety, result, reason, ${s}.epoch_ms(updated_at) as updated_at_ms`;

/**
 * How many keys are uncertain and for how long the oldest has been; `sideeffect stats` asks the
 * same. Every function and operator is pg_catalog's or the store's, whatever the caller's path.
 */
export const uncertainBacklog = (s: string): string => `select pg_catalog.count(*) as count,
    coalesce(${s}.epoch_ms(${s}.store_now()) operator(pg_catalog.-)
             ${s}.epoch_ms(pg_catalog.min(updated_at)), 0) as oldest_age_ms
    from ${s}.keys where state = 'uncertain'`;

const SQL = {
  // A done key with this binding is answered by one primary-key read and nothing else:
  // acquire_fresh() sits in a CASE, evaluated only when there is no such row, so a replay executes
  // no function and initializes no function scan (as a UNION branch it cost a quarter of the
  // replay's database time, and its six columns a sixth of the Node time to parse). The fallback's
  // row comes back as JSON: a grant of a key never seen on a free resource, in the same statement,
  // or whatever acquire() decided for every other case.
  // `state` is judged outside the WHERE on purpose: with `state = 'done'` in it, a connection whose
  // cached generic plan was made while the table was nearly empty scanned the state index, every
  // done key, on each replay.
  // The lock wait bound ($7, see lockWaitMs) is set only where a lock may be waited for: in the
  // CASE, before acquire_fresh() (Postgres evaluates AND from the left), for this statement alone.
  acquire: (s: string) => `select h.result as o_result,
      case when h.done is not true
                and pg_catalog.set_config('lock_timeout', $7, true) is not null
           then pg_catalog.to_jsonb(${s}.acquire_fresh($1, $2, $3, $4, $5, $6)) end as o_fresh
    from (select) as one
    left join (select state = 'done' as done, result from ${s}.keys
               where key = $1 and resource = $2 and digest = $3) as h on true`,
  // The holder's calls wait for their resource's row at most lockWaitMs too (the last parameter),
  // set first in a CASE as in acquire: a transactional grant that took the resource over keeps
  // that row locked for its whole work.
  renew: (s: string) => `select
      case when pg_catalog.set_config('lock_timeout', $6, true) is not null
           then pg_catalog.to_jsonb(${s}.renew($1, $2, $3, $4, $5)) end as o_renewed`,
  // The holder's complete in one statement: release the resource and move the key to done,
  // recording on the row the state it was completed from (the completion's event, see events).
  // complete_held() (0013: the runtime role writes no table itself) matches only this holder at
  // this fence, holding its key held or applying (the invariant every transition keeps), so it is
  // the fence check and the key moves with it. Nothing moved means nothing was written: complete()
  // judges it (a repeat, a stale fence, or a broken invariant, which it raises). The lock wait
  // bound ($5) is set in the CASE before the subquery (an initplan, run when first needed) runs.
  complete: (s: string) => `select
      case when pg_catalog.set_config('lock_timeout', $5::text, true) is not null
           then (select count(*) from ${s}.complete_held($1, $2, $3, $4)) end as o_moved`,
  completeJudged: (s: string) => `select
      case when pg_catalog.set_config('lock_timeout', $5, true) is not null
           then pg_catalog.to_jsonb(${s}.complete($1, $2, $3, $4)) end as o_judged`,
  markUncertain: (s: string) => `select
      case when pg_catalog.set_config('lock_timeout', $5, true) is not null
           then ${s}.mark_uncertain($1, $2, $3, $4) end as o_outcome`,
  release: (s: string) => `select
      case when pg_catalog.set_config('lock_timeout', $4, true) is not null
           then ${s}.release($1, $2, $3) end as o_outcome`,
  resolve: (s: string) => `select * from ${s}.resolve_uncertain($1, $2, $3, $4, $5, $6, $7)`,
  hold: (s: string) => `select * from ${s}.hold_verdict($1, $2, $3, $4, $5, $6, $7)`,
  judge: (s: string) => `select * from ${s}.judge_verdict($1, $2, $3)`,
  heldVerdicts: (s: string) => `select ${heldColumns(s)} from ${s}.pending_verdicts
    where key = $1 order by id`,
  heldVerdict: (s: string) => `select ${heldColumns(s)} from ${s}.pending_verdicts where id = $1`,
  pendingVerdictKeys: (s: string) => `select v.key from ${s}.pending_verdicts v
    join ${s}.keys k on k.key = v.key and k.state = 'uncertain' and k.fence = v.fence
    where v.state = 'pending' group by v.key order by pg_catalog.min(v.id) limit $1`,
  sweep: (s: string) => `select * from ${s}.sweep()`,
  purge: (s: string) => `select ${s}.purge_batch($1, $2) as o_purged`,
  inspect: (s: string) => `select ${keyColumns(s)} from ${s}.keys where key = $1`,
  list: (s: string) => `select ${keyColumns(s)} from ${s}.keys where $1::text is null or state = $1
    order by updated_at desc limit $2`,
  listOldest: (
    s: string,
  ) => `select ${keyColumns(s)} from ${s}.keys where $1::text is null or state = $1
    order by updated_at asc limit $2`,
  // Claims lock the keys they pick (others skip them); the conflict clause re-checks the latest
  // committed start, so a claimer whose snapshot missed another's start cannot claim it twice
  // (claim_reconciles(), 0013).
  claimReconciles: (s: string) => `select ${keyColumns(s)} from ${s}.keys
    join ${s}.claim_reconciles($1, $2) as claimed (key) using (key) order by updated_at`,
  // The transactional grant of a key never seen, on a resource nobody holds: the resource row
  // locked and its fence raised by one UPDATE, and the PgFencedSink mark of the resource raised to
  // it (see txRaiseSink), in tx_grant_fresh() (0013). tx_acquire(), in a CASE evaluated
  // only when that UPDATE matched nothing, judges every other case. The key is looked for with
  // the statement's snapshot, taken before the row lock was ours: `o_seen` is the fence that
  // snapshot saw, so a row that moved while this statement waited (o_fence is not o_seen + 1) is
  // judged again by txRecheck, which reads the key afresh.
  txAcquire: (s: string) => `select g.o_fence, g.o_seen,
      case when g.o_fence is null then pg_catalog.to_jsonb(${s}.tx_acquire($1, $2, $3)) end as o_judged,
      pg_catalog.txid_current() as o_xid,
      pg_catalog.set_config('sideeffect.transactional_key', $1, true) is not null as o_marked,
      pg_catalog.set_config('lock_timeout', $4, true) is not null as o_restored
    from (select) as one left join ${s}.tx_grant_fresh($1, $2) as g on true`,
  // One fence per resource across both modes: a transactional grant raises the sink's mark in its
  // own transaction, so a plain holder it took over (paused, its lease gone) has its late
  // writeFenced refused, as a plain successor's write would have it refused. Raised at the grant,
  // before the work: the mark's row is locked before any row the work touches, as writeFenced
  // locks it before its write, so the two never wait on each other in a cycle.
  txRaiseSink: (s: string) => `select ${s}.raise_sink_mark($1, $2, true)`,
  txRecheck: (s: string) => `select * from ${s}.tx_recheck($1, $2, $3, $4)`,
  // The transactional effect's key, written once as done in the caller's transaction (the resource
  // row is still locked by txAcquire), its one transition recorded on the row. Written only while
  // this is still the grant's transaction ($7, its id): work that ended it (COMMIT, ROLLBACK) gets
  // o_same false and nothing written. No o_at_ms with o_same: a key of that name was committed
  // meanwhile (on another resource), so this attempt is rolled back and asked again.
  txComplete: (s: string) => `select o_same, o_at_ms
    from ${s}.tx_record($1, $2, $3, $4, $5, $6, $7)`,
  // After work that rolled the grant back: its fence may have been used by what the work wrote
  // after the ROLLBACK (committed on its own), so the resource moves past it unless someone holds
  // it or has moved it already.
  txBurnFence: (s: string) => `select from ${s}.tx_burn_fence($1, $2)`,
  binding: (s: string) => `select resource, digest from ${s}.keys where key = $1`,
  uncertainBacklog: (s: string) => uncertainBacklog(s),
  // The logged events, with the two recorded on the key row in their place: its first grant (or
  // transactional commit) before them, its completion after them. Each reads as it would logged.
  events: (s: string) => `select key, from_state, to_state, fence, reason, actor, identity, db_user,
    ${s}.epoch_ms(at) as at_ms from (
      select key, 'free' as from_state, granted_state as to_state, granted_fence as fence,
        case granted_state when 'done' then 'applied in transaction' else 'granted' end as reason,
        case granted_state when 'done' then 'executeInTransaction' else 'acquire' end as actor,
        granted_at as at, null::text as identity, null::text as db_user, 0 as part, 0::bigint as id
      from ${s}.keys where key = $1 and granted_at is not null
      union all
      select key, from_state, to_state, fence, reason, actor, at, identity, db_user, 1, id
      from ${s}.events where key = $1
      union all
      select key, completed_from, 'done', fence, 'completed', 'complete', updated_at, null, null,
        2, 0
      from ${s}.keys where key = $1 and completed_from is not null
    ) logged order by part, id`,
};

/** What the acquire statement answers: a done key's result, or acquire_fresh()'s row as JSON. */
interface AcquireHit {
  o_result: Buffer | null;
  o_fresh: AcquireJson | null;
}

/** An acquire function's row through to_jsonb: numbers as numbers, bytea as its text form. */
type AcquireJson = Omit<AcquireRow, 'o_result'> & { o_result: string | null };

/** What the acquire functions answer. */
interface AcquireRow {
  o_outcome: string;
  o_fence: string | number | null;
  o_expires_at_ms: string | number | null;
  o_retry_after_ms: string | number | null;
  o_result: Buffer | null;
  o_reason: string | null;
}

/** An acquire function's row, come back through to_jsonb. */
function fromJson(row: AcquireJson): AcquireRow {
  return { ...row, o_result: row.o_result === null ? null : parseBytea(row.o_result) };
}

/** A transactional attempt that found its key committed by another caller: asked again. */
const LOST_RACE = Symbol('lost race');

/** A transactional attempt whose grant gave up waiting for the resource's row. */
const ROW_HELD = Symbol('row held');

/**
 * The lock wait of an acquire's first look: long enough for a row another statement holds for
 * its own few milliseconds, far too short to hold a connection while a transaction holds it.
 */
const FIRST_LOOK = '5ms';

/** pg's own bytea parser, for the bytea inside JSON: it reads whichever `bytea_output` the session uses. */
const parseBytea = pg.types.getTypeParser(pg.types.builtins.BYTEA, 'text') as (
  text: string,
) => Buffer;

interface KeyRow {
  key: string;
  resource: string;
  state: KeyState;
  fence: string;
  retry_safety: RetrySafety;
  result: Buffer | null;
  reason: string | null;
  updated_at_ms: string;
}

/**
 * The production Store: the key state machine (docs/architecture.md) in Postgres, one statement per
 * decision (a plpgsql function, or for the common paths a one-statement SQL function with the
 * general one as its fallback; see migrations/; every write through a function that runs with the
 * schema owner's rights), each deciding and writing atomically under row locks, with lease
 * expiry judged by the database clock: one round trip per operation (two only for a complete
 * the plain statement could not apply: a repeat or a stale fence). Workers on
 * many machines share it safely; the MemoryStore semantics hold exactly (same conformance suite).
 *
 * Each operation runs at READ COMMITTED whatever the database's default, on a client whose
 * connection errors are heard from checkout on; through PgBouncer in transaction mode set
 * `transactionPooling`.
 *
 * Input is validated here before anything is sent (InvalidActionError, nothing written). A lost
 * connection or any other database failure is thrown as StoreUnavailableError with the cause:
 * an operation whose fate we do not know is never reported as an outcome.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await migrate(pool, { schema: 'sideeffect' });
 * const store = new PgStore({ pool, schema: 'sideeffect' });
 * ```
 */
export class PgStore implements TransactionalStore<pg.PoolClient>, VerdictHolding {
  readonly #pool: pg.Pool;
  readonly #ownsPool: boolean;
  readonly #limits: Limits;
  readonly #sql: Record<keyof typeof SQL, Statement>;
  readonly #schema: string;
  /** Sweep leaders in this process, each on the session that holds the advisory lock. */
  readonly #leaders = new Map<object, Session>();
  /** Stops watching a leader's session for its end (before it goes back to the pool). */
  readonly #unwatch = new Map<object, () => void>();
  readonly #transactionPooling: boolean;
  readonly #purgeBatch: number;
  /** Rest after a purge batch, per millisecond the batch took. */
  readonly #purgeRest: number;
  readonly #lockWaitMs: number;
  readonly #sweepLockKey: string;
  /** lockWaitMs as the value of Postgres's `lock_timeout`. */
  readonly #lockTimeout: string;
  /** This store's acquire calls in flight per resource (waitersPerResource). */
  readonly #waiters: ResourceWaiters;

  constructor(options: PgStoreOptions = {}) {
    const batch = options.purgeBatchSize ?? 5_000;
    if (!Number.isSafeInteger(batch) || batch < 1 || batch > 2 ** 31 - 1) {
      throw new InvalidActionError('purgeBatchSize', `must be a positive integer, got ${batch}`);
    }
    this.#purgeBatch = batch;
    const duty = options.purgeDutyCycle ?? 0.25;
    if (typeof duty !== 'number' || !(duty > 0 && duty <= 1)) {
      throw new InvalidActionError('purgeDutyCycle', `must be in (0, 1], got ${String(duty)}`);
    }
    this.#purgeRest = (1 - duty) / duty;
    const lockWaitMs = options.lockWaitMs ?? 1_000;
    if (!Number.isSafeInteger(lockWaitMs) || lockWaitMs < 1 || lockWaitMs > 2 ** 31 - 1) {
      throw new InvalidActionError('lockWaitMs', `must be a positive integer, got ${lockWaitMs}`);
    }
    this.#lockWaitMs = lockWaitMs;
    this.#lockTimeout = `${lockWaitMs}ms`;
    const waiters = options.waitersPerResource ?? 1;
    if (!Number.isSafeInteger(waiters) || waiters < 1) {
      throw new InvalidActionError(
        'waitersPerResource',
        `must be a positive integer, got ${String(waiters)}`,
      );
    }
    this.#waiters = new ResourceWaiters(waiters, lockWaitMs);
    this.#schema = options.schema ?? defaultSchema();
    this.#transactionPooling = options.transactionPooling === true;
    this.#sweepLockKey = sweepLockKey(this.#schema);
    this.#sql = statements(this.#schema, SQL, {
      named: options.transactionPooling !== true,
    });
    this.#limits = { ...defaultLimits, ...options.limits };
    const { pool, owned } = openPool(options);
    this.#pool = pool;
    this.#ownsPool = owned;
  }

  /**
   * Which migrations this store's schema has and which it lacks ({@link migrationStatus}), so
   * `SideEffectPlugin` refuses to start a worker on a schema nobody migrated, with the fix,
   * instead of its activities retrying "relation does not exist" for ever.
   */
  migrationStatus(): Promise<MigrationStatus> {
    return migrationStatus(this.#pool, { schema: this.#schema });
  }

  /** Gives up any sweep leadership, then ends the pool if this store made it; a pool passed in is left to its owner. */
  async close(): Promise<void> {
    await Promise.all([...this.#leaders.keys()].map((owner) => this.resignSweep(owner)));
    if (this.#ownsPool) await this.#pool.end();
  }

  async claimReconciles(options: { limit: number; restartAfterMs: number }): Promise<KeyRecord[]> {
    const { limit, restartAfterMs } = options;
    if (!Number.isSafeInteger(limit) || limit < 0)
      throw new InvalidActionError('limit', `must be a non-negative integer, got ${String(limit)}`);
    checkTtl(restartAfterMs);
    const rows = await this.#rows<KeyRow>('claimReconciles', [limit, restartAfterMs]);
    return rows.map(toRecord);
  }

  /**
   * Leader by an advisory lock per schema, held on one pooled connection for as long as the
   * owner leads (that connection is not available to other work meanwhile). A leader whose
   * process or connection dies loses the lock with its session. Through a transaction-mode
   * pooler a session lock would stay on a server connection that other clients then share, so
   * there the lock is transaction-scoped and the leader keeps its transaction open: an open
   * transaction pins one server connection to it.
   */
  async leadSweep(owner: object, onLost?: () => void): Promise<boolean> {
    const held = this.#leaders.get(owner);
    if (held) {
      try {
        await held.client.query('select 1');
        return true;
      } catch {
        this.#forget(owner);
        held.release(true);
        return false;
      }
    }
    const session = await checkoutFor(this.#pool, 'leadSweep');
    const pinned = this.#transactionPooling;
    try {
      if (pinned) await session.client.query('begin isolation level read committed');
      const lock = pinned ? 'pg_try_advisory_xact_lock' : 'pg_try_advisory_lock';
      // No parameters, so a simple query: the extended protocol would leave an unnamed portal open
      // in the leader's transaction (through a pooler), with its snapshot pinning the xmin
      // horizon, and vacuum with it, until the next statement.
      const { rows } = await session.client.query<{ led: boolean }>(
        `select pg_catalog.${lock}(${this.#sweepLockKey}::bigint) as led`,
      );
      if (!rows[0]?.led) {
        if (pinned) await session.client.query('rollback');
        session.release();
        return false;
      }
      this.#leaders.set(owner, session);
      // A terminated or broken session has lost the lock already: tell the owner now.
      const lost = (): void => {
        if (this.#leaders.get(owner) !== session) return;
        this.#forget(owner);
        // Discarded now; a late socket error on it must not reach Node as unhandled.
        session.client.on('error', () => {});
        session.release(true);
        onLost?.();
      };
      session.client.on('error', lost);
      session.client.on('end', lost);
      this.#unwatch.set(owner, () => {
        session.client.off('error', lost);
        session.client.off('end', lost);
      });
      return true;
    } catch (error) {
      session.release(true);
      throw storeError('leadSweep', error);
    }
  }

  async resignSweep(owner: object): Promise<void> {
    const session = this.#leaders.get(owner);
    if (!session) return;
    this.#forget(owner);
    try {
      if (this.#transactionPooling) await session.client.query('rollback');
      else
        await session.client.query(
          `select pg_catalog.pg_advisory_unlock(${this.#sweepLockKey}::bigint)`,
        );
      session.release();
    } catch {
      // Closing the session ends the lock too.
      session.release(true);
    }
  }

  #forget(owner: object): void {
    this.#leaders.delete(owner);
    this.#unwatch.get(owner)?.();
    this.#unwatch.delete(owner);
  }

  async acquire(
    action: Action,
    ttlMs: number,
    options: { applying?: boolean } = {},
  ): Promise<Acquisition> {
    const a = checkAction(action, this.#limits);
    checkLeaseTtl(ttlMs, this.#limits);
    const digest = payloadDigest(a.payload);
    const values = (lockTimeout: string) => [
      a.key,
      a.resource,
      digest,
      a.retrySafety,
      ttlMs,
      options.applying === true,
      lockTimeout,
    ];
    const pass = this.#waiters.enter(a.resource);
    if (!pass) return this.#turnedAway(a.resource);
    let answer: AcquireHit;
    try {
      try {
        answer = await this.#askAcquire(values(pass.placed ? this.#lockTimeout : FIRST_LOOK));
      } catch (error) {
        if (!lockWaitExceeded(error)) throw error;
        if (pass.placed) {
          pass.held();
          return { outcome: 'contended', retryAfterMs: this.#lockWaitMs };
        }
        // The resource's row is held: waited for by at most waitersPerResource of these calls.
        if (!pass.held()) return this.#turnedAway(a.resource);
        try {
          answer = await this.#askAcquire(values(this.#lockTimeout));
        } catch (error) {
          if (!lockWaitExceeded(error)) throw error;
          pass.held();
          return { outcome: 'contended', retryAfterMs: this.#lockWaitMs };
        }
      }
    } finally {
      pass.leave();
    }
    const { o_result, o_fresh } = answer;
    if (!o_fresh) return { outcome: 'replayed', result: { payload: plainBytes(o_result!) } };
    return this.#acquisition(a, ttlMs, fromJson(o_fresh), false);
  }

  /** The acquire statement; a fresh grant that lost a race is asked once more. */
  async #askAcquire(values: unknown[]): Promise<AcquireHit> {
    try {
      return (await this.#rows<AcquireHit>('acquire', values))[0]!;
    } catch (error) {
      if (!lostRace(error)) throw error;
      // Asked once more, acquire_fresh() now sees the key and leaves it to acquire(), which
      // judges it under the locks.
      return (await this.#rows<AcquireHit>('acquire', values))[0]!;
    }
  }

  async executeInTransaction(
    action: Action,
    ttlMs: number,
    work: (context: TransactionContext<pg.PoolClient>) => Promise<Result>,
    options: TransactionOptions = {},
  ): Promise<Execution> {
    const a = checkAction(action, this.#limits);
    checkLeaseTtl(ttlMs, this.#limits);
    const isolation = options.isolation ?? 'read committed';
    if (!TRANSACTION_ISOLATIONS.includes(isolation)) {
      throw new InvalidActionError(
        'isolation',
        `must be one of ${TRANSACTION_ISOLATIONS.join(', ')}`,
      );
    }
    for (let attempt = 1; ; attempt++) {
      // Above READ COMMITTED a snapshot older than a concurrent commit fails the attempt
      // (SQLSTATE 40001) instead of deciding from it: nothing of it stayed, so it runs again.
      const retry = (error: unknown) =>
        isolation !== 'read committed' &&
        attempt < SERIALIZATION_ATTEMPTS &&
        isSerializationFailure(error);
      let execution: Execution | typeof LOST_RACE;
      try {
        execution = await this.#transactionAttempt(a, ttlMs, work, options.signal, isolation);
      } catch (error) {
        if (retry(error)) continue;
        throw error;
      }
      if (execution === LOST_RACE) continue;
      if (execution.outcome === 'failed' && retry(execution.error)) continue;
      return execution;
    }
  }

  /**
   * One attempt: a first look that waits for no held row, then, if the resource's row is held,
   * the attempt again waiting for it at most lockWaitMs, by at most waitersPerResource of this
   * store's calls at a time (the place is left once the grant is answered: the work is no wait).
   */
  async #transactionAttempt(
    a: Required<Action>,
    ttlMs: number,
    work: (context: TransactionContext<pg.PoolClient>) => Promise<Result>,
    signal: AbortSignal | undefined,
    isolation: TransactionIsolation,
  ): Promise<Execution | typeof LOST_RACE> {
    const pass = this.#waiters.enter(a.resource);
    if (!pass) return this.#turnedAway(a.resource);
    try {
      const once = (lockTimeout: string) =>
        this.#transactionOnce(a, ttlMs, work, signal, isolation, lockTimeout, pass.leave);
      // A busy resource's place waits from the start; anyone else first looks.
      if (pass.placed) return this.#afterWait(await once(this.#lockTimeout), pass);
      const first = await once(FIRST_LOOK);
      if (first !== ROW_HELD) return first;
      if (!pass.held()) return this.#turnedAway(a.resource);
      return this.#afterWait(await once(this.#lockTimeout), pass);
    } finally {
      pass.leave();
    }
  }

  /** A waited attempt's answer: a wait given up is `contended`, the resource still busy. */
  #afterWait(
    execution: Execution | typeof LOST_RACE | typeof ROW_HELD,
    pass: WaiterPass,
  ): Execution | typeof LOST_RACE {
    if (execution !== ROW_HELD) return execution;
    pass.held();
    return { outcome: 'contended', retryAfterMs: this.#lockWaitMs };
  }

  /**
   * One transaction: grant, the effect's work, the key written done, commit. LOST_RACE when the
   * key turned out committed meanwhile by another caller: everything of this attempt, the work's
   * statements included, is rolled back, and the next attempt sees that key (a replay, or a
   * conflict). ROW_HELD when the grant gave up waiting for the resource's row after
   * `lockTimeout`; `answered` is called once the grant has its answer.
   */
  async #transactionOnce(
    a: Required<Action>,
    ttlMs: number,
    work: (context: TransactionContext<pg.PoolClient>) => Promise<Result>,
    signal: AbortSignal | undefined,
    isolation: TransactionIsolation,
    lockTimeout: string,
    answered: () => void,
  ): Promise<Execution | typeof LOST_RACE | typeof ROW_HELD> {
    const operation = 'executeInTransaction';
    const session = await checkoutFor(this.#pool, operation);
    const { client } = session;
    // A query that failed leaves the connection unfit for the pool, like a lost one.
    let broken = false;
    const query = async <R extends pg.QueryResultRow>(
      statement: string | Statement,
      values?: unknown[],
    ): Promise<pg.QueryResult<R>> => {
      try {
        return await client.query<R>(
          typeof statement === 'string' ? statement : { ...statement, values },
        );
      } catch (error) {
        if (!isLockNotAvailable(error)) broken = true;
        throw storeError(operation, error);
      }
    };
    /** Nothing of this attempt may stay: a rollback that fails means the connection died, which rolls back too. */
    let open = false;
    /** The session as it came out of the pool (SESSION_STATE), to give it back so. */
    let sessionBefore: string | undefined;
    /** The work changed what cannot be put back (a temp table, a PREPARE): the connection is not given back. */
    let changed = false;
    const pooled = this.#transactionPooling;
    const end = async (command: 'commit' | 'rollback'): Promise<pg.QueryResult> => {
      // A rollback leaves the work's session advisory locks (and, behind a pooler, its SQL
      // prepared statements, which elsewhere discard the connection) on the session.
      const cleanup =
        command === 'commit'
          ? ''
          : pooled
            ? `${POOLED_AFTER_ROLLBACK};`
            : 'select pg_catalog.pg_advisory_unlock_all();';
      const results = (await query(
        `${command}; ${cleanup} select ${SESSION_STATE} as session`,
      )) as unknown as pg.QueryResult[];
      open = false;
      if (results.at(-1)!.rows[0]!.session !== sessionBefore) changed = true;
      return results[0]!;
    };
    const rollBack = async (): Promise<void> => {
      await end('rollback').catch(() => {});
      open = false;
    };
    const commit = (): Promise<pg.QueryResult> => end('commit');
    let deadline: ReturnType<typeof armDeadline> | undefined;
    try {
      // The grant's lock wait ends before the TTL's statement cut does: a caller with a TTL
      // below lockWaitMs is told contended, not "store unavailable".
      // A first look (FIRST_LOOK) waits less than that already.
      const grantWait =
        lockTimeout === FIRST_LOOK
          ? lockTimeout
          : `${Math.max(1, Math.min(this.#lockWaitMs, Math.floor(ttlMs / 2)))}ms`;
      const known = pooled ? POOLED_BASELINE : knownBaseline(client);
      const columns = pooled
        ? `, ${POOLED_COUNTS_AT_BEGIN}`
        : known
          ? ''
          : `, ${SESSION_BASELINE} as baseline`;
      const startedAt = performance.now();
      const begun = (await query(
        beginTransaction(isolation, ttlMs, grantWait, columns),
      )) as unknown as [
        pg.QueryResult,
        pg.QueryResult<{
          lock_timeout: string;
          session: string;
          pid: number;
          baseline?: string;
          temp_at_begin?: string;
          prepared_at_begin?: string;
        }>,
      ];
      open = true;
      const opened = begun[1].rows[0]!;
      sessionBefore = opened.session;
      const baseline = known ?? rememberBaseline(client, opened.baseline!);
      const digest = transactionalDigest(a.payload);
      let granted: pg.QueryResult<{
        o_fence: string | null;
        o_seen: string | null;
        o_judged: AcquireJson | null;
        o_xid: string;
      }>;
      try {
        granted = await query(this.#sql.txAcquire, [
          a.key,
          a.resource,
          digest,
          opened.lock_timeout,
        ]);
      } catch (error) {
        if (!lockWaitExceeded(error)) throw error;
        // The resource's row is held by another transaction (a transactional holder) past the bound.
        await rollBack();
        return ROW_HELD;
      }
      // Answered: the work that may follow is no wait, and does not count as one.
      answered();
      const { o_fence, o_seen, o_judged, o_xid } = granted.rows[0]!;
      let judged = o_judged && fromJson(o_judged);
      if (o_fence !== null && int(o_fence) !== int(o_seen) + 1) {
        // The row moved while the grant waited for it: the key may have been committed meanwhile.
        const rechecked = await query<AcquireRow>(this.#sql.txRecheck, [
          a.key,
          a.resource,
          digest,
          o_fence,
        ]);
        judged = rechecked.rows[0]!;
      }
      if (judged && judged.o_outcome !== 'applied') {
        // No other answer keeps a write; the transaction ends before a conflict's binding is
        // looked up on another connection.
        await rollBack();
        const acquisition = await this.#acquisition(a, ttlMs, judged, true);
        return acquisition.outcome === 'uncertain'
          ? {
              outcome: 'uncertain',
              reason: acquisition.reason,
              error: new OutcomeUncertainError(a.key, a.resource, acquisition.reason),
            }
          : (acquisition as Execution);
      }
      const fence = int(judged ? judged.o_fence : o_fence);
      // tx_acquire() granted (a new resource, a takeover): the statement raised no mark.
      if (o_judged) await query(this.#sql.txRaiseSink, [a.resource, fence]);
      let payload: Uint8Array;
      let completedAt: number;
      /** The first statement of the work that would have ended the transaction, refused. */
      let ended: TransactionEndedError | undefined;
      const tx = guardedClient(client, a.key, (error) => {
        ended ??= error;
      });
      // Whatever the work sets (statement_timeout = 0), the transaction ends. Postgres's own cuts
      // (each statement and pause at the TTL) stay the bound of work that leaves them alone; this
      // one, measured by a process that may itself be descheduled, leaves them the time to act
      // first: a whole transaction of a few round trips on a loaded machine can outlast a TTL of
      // tens of milliseconds without any of its statements doing so.
      deadline = armDeadline(this.#pool, {
        pid: opened.pid,
        xid: o_xid,
        ms: ttlMs + Math.max(ttlMs, DEADLINE_GRACE_MS) - (performance.now() - startedAt),
      });
      try {
        signal?.throwIfAborted();
        let result: Result | undefined;
        let thrown: { error: unknown } | undefined;
        try {
          result = await runAsTransactionalWork(a.key, () =>
            work({ tx, key: a.key, fence, signal: signal ?? new AbortController().signal }),
          );
        } catch (error) {
          thrown = { error };
        }
        // A refused end of the transaction is the answer, whatever the work did after it.
        if (ended) {
          await rollBack();
          return { outcome: 'failed', error: ended };
        }
        if (thrown) throw thrown.error;
        payload = checkBytes('result', result?.payload, this.#limits.maxPayloadBytes);
        const reset = (await query(
          resetAfterWork(client, {
            baseline,
            ttlMs,
            remainingMs: ttlMs - (performance.now() - startedAt),
            key: a.key,
            pooled,
          }),
        )) as unknown as pg.QueryResult[];
        const refused =
          pooled &&
          refusedSessionState(reset, {
            temp: Number(opened.temp_at_begin),
            prepared: Number(opened.prepared_at_begin),
          });
        if (refused) {
          await rollBack();
          return {
            outcome: 'failed',
            error: new TransactionMisuseError(
              a.key,
              'session-state',
              `behind a transaction-mode pooler the work may change only transaction-local state; it left ${refused}, which the pooler's next client would get`,
            ),
          };
        }
        const completed = await query<{ o_same: boolean; o_at_ms: string | null }>(
          this.#sql.txComplete,
          [a.key, a.resource, digest, fence, a.retrySafety, asBuffer(payload), o_xid],
        );
        const { o_same, o_at_ms } = completed.rows[0]!;
        if (!o_same) {
          await rollBack();
          await this.#rows('txBurnFence', [a.resource, fence]).catch(() => {});
          return { outcome: 'failed', error: new TransactionEndedError(a.key) };
        }
        if (o_at_ms === null) {
          await rollBack();
          return LOST_RACE;
        }
        completedAt = int(o_at_ms);
      } catch (error) {
        // Before commit nothing is visible to anyone: rolled back, the effect did not happen.
        await rollBack();
        if (isCommitRefused(error)) {
          return { outcome: 'failed', error: new TransactionEndedError(a.key, { cause: error }) };
        }
        // Unless the key was committed meanwhile by another caller (on another resource, so no
        // lock told this one): then its failure was that commit's work seen, and the caller is
        // owed the key's answer (a replay, a conflict), not `failed`.
        if (!broken && (await this.#keyExists(a.key))) return LOST_RACE;
        return { outcome: 'failed', error };
      }
      const committed = await commit();
      // COMMIT of a transaction in which a statement failed answers ROLLBACK, not an error.
      if (committed.command !== 'COMMIT') {
        return {
          outcome: 'failed',
          error: new Error(
            'rolled back: a statement of the effect failed and its error was caught inside it',
          ),
        };
      }
      // The lease ended with the commit that recorded the result.
      const lease = { resource: a.resource, fence, ttlMs, expiresAt: completedAt };
      return { outcome: 'applied', result: { payload: plainBytes(payload) }, lease };
    } finally {
      // A connection left inside a transaction (an unexpected throw) must not go back to the pool,
      // nor one whose session the work changed: the pool's next user would inherit its role,
      // search_path or timeouts. Discarded, it is replaced by a fresh one.
      deadline?.disarm();
      session.release(broken || open || changed || deadline?.fired === true);
    }
  }

  /** An acquire turned away by waitersPerResource: it waits for nothing, on no connection. */
  #turnedAway(resource: string): { outcome: 'contended'; retryAfterMs: number } {
    return { outcome: 'contended', retryAfterMs: this.#waiters.retryAfterMs(resource) };
  }

  /** Whether a key of this name is recorded; a store that cannot answer says no. */
  async #keyExists(key: Key): Promise<boolean> {
    const rows = await this.#rows('binding', [key]).catch(() => []);
    return rows.length > 0;
  }

  /** Turns acquire's row into an Acquisition; a conflict says whether it is the other execution mode. */
  async #acquisition(
    a: Required<Action>,
    ttlMs: number,
    row: AcquireRow,
    transactional: boolean,
  ): Promise<Acquisition> {
    switch (row.o_outcome) {
      case 'applied': // the schema's word for a grant (frozen in 0001_init.sql)
        return {
          outcome: 'granted',
          lease: {
            resource: a.resource,
            fence: int(row.o_fence),
            ttlMs,
            expiresAt: int(row.o_expires_at_ms),
          },
        };
      case 'replayed':
        return { outcome: 'replayed', result: { payload: plainBytes(row.o_result!) } };
      case 'contended':
        return { outcome: 'contended', retryAfterMs: int(row.o_retry_after_ms) };
      case 'uncertain':
        return { outcome: 'uncertain', reason: maskConnectionString(row.o_reason ?? '') };
      case 'conflict:resource':
      case 'conflict:payload':
        throw await this.#conflict(a, transactional);
      default:
        throw new UnexpectedStoreAnswerError(row.o_outcome);
    }
  }

  /** Which part of the key's binding differs: its resource, the other execution mode, or the payload. */
  async #conflict(a: Required<Action>, transactional: boolean): Promise<KeyConflictError> {
    const rows = await this.#rows<{ resource: string; digest: Buffer }>('binding', [a.key]);
    const bound = rows[0];
    if (bound && bound.resource !== a.resource) return new KeyConflictError(a.key, 'resource');
    const other = transactional ? payloadDigest(a.payload) : transactionalDigest(a.payload);
    return new KeyConflictError(a.key, bound?.digest.equals(other) ? 'transactional' : 'payload');
  }

  async renew(
    action: Action,
    lease: Lease,
    ttlMs: number,
    options: { applying?: boolean } = {},
  ): Promise<Lease> {
    const a = this.#leaseAction(action, lease);
    checkLeaseTtl(ttlMs, this.#limits);
    const [{ o_renewed }] = (await this.#holderRows<{
      o_renewed: { o_outcome: string; o_expires_at_ms: number | null };
    }>('renew', a, [a.key, a.resource, lease.fence, ttlMs, options.applying === true])) as [
      { o_renewed: { o_outcome: string; o_expires_at_ms: number | null } },
    ];
    this.#expect(o_renewed.o_outcome, 'renewed', a.resource, lease);
    return { ...lease, ttlMs, expiresAt: int(o_renewed.o_expires_at_ms) };
  }

  async complete(action: Action, lease: Lease, result: Result): Promise<Result> {
    const payload = checkBytes('result', result?.payload, this.#limits.maxPayloadBytes);
    const a = this.#leaseAction(action, lease);
    const values = [a.key, a.resource, lease.fence, asBuffer(payload)];
    const [{ o_moved }] = (await this.#holderRows<{ o_moved: string }>('complete', a, values)) as [
      { o_moved: string },
    ];
    if (Number(o_moved) === 1) return { payload: plainBytes(payload) };
    const [{ o_judged }] = (await this.#holderRows<{
      o_judged: { o_outcome: string; o_result: string | null };
    }>('completeJudged', a, values)) as [
      { o_judged: { o_outcome: string; o_result: string | null } },
    ];
    if (o_judged.o_outcome === 'replayed') {
      return { payload: plainBytes(parseBytea(o_judged.o_result!)) };
    }
    this.#expect(o_judged.o_outcome, 'completed', a.resource, lease);
    return { payload: plainBytes(payload) };
  }

  async markUncertain(action: Action, lease: Lease, reason: string): Promise<void> {
    const masked = checkReason(reason, this.#limits);
    const a = this.#leaseAction(action, lease);
    const [row] = await this.#holderRows<{ o_outcome: string }>('markUncertain', a, [
      a.key,
      a.resource,
      lease.fence,
      masked,
    ]);
    this.#expect(row!.o_outcome, 'marked', a.resource, lease);
  }

  async release(action: Action, lease: Lease): Promise<void> {
    const a = this.#leaseAction(action, lease);
    const [row] = await this.#holderRows<{ o_outcome: string }>('release', a, [
      a.key,
      a.resource,
      lease.fence,
    ]);
    this.#expect(row!.o_outcome, 'released', a.resource, lease);
  }

  /**
   * A holder's statement, waiting for its resource's row at most lockWaitMs: past that (a
   * transactional grant holds the row for its work) it throws ContendedError, nothing written,
   * instead of holding a pool connection for the rest of that transaction.
   */
  async #holderRows<R extends pg.QueryResultRow>(
    operation: 'renew' | 'complete' | 'completeJudged' | 'markUncertain' | 'release',
    a: Required<Action>,
    values: unknown[],
  ): Promise<R[]> {
    try {
      return await this.#rows<R>(operation, [...values, this.#lockTimeout]);
    } catch (error) {
      if (!lockWaitExceeded(error)) throw error;
      throw new ContendedError(a.key, a.resource, this.#lockWaitMs, {
        cause: (error as StoreUnavailableError).cause,
      });
    }
  }

  async resolveUncertain(key: Key, resolution: Resolution): Promise<ResolveOutcome> {
    checkText('key', key, this.#limits.maxKeyBytes);
    const verdict = checkResolution(resolution, this.#limits);
    const result = verdict.result && asBuffer(verdict.result.payload);
    const row = await this.#one<{
      o_outcome: string;
      o_result: Buffer | null;
      o_state: string | null;
      o_fence: string | null;
    }>('resolve', [
      key,
      verdict.applied,
      result ?? null,
      verdict.reason,
      verdict.by ?? 'resolve',
      verdict.fence ?? null,
      verdict.identity ?? null,
    ]);
    switch (row.o_outcome) {
      case 'resolved':
        return verdict.applied
          ? { outcome: 'resolved', applied: true, result: { payload: plainBytes(result!) } }
          : { outcome: 'resolved', applied: false };
      default:
        return verdictRefusal(key, verdict.fence, row);
    }
  }

  async holdVerdict(key: Key, resolution: Resolution): Promise<HoldOutcome> {
    checkText('key', key, this.#limits.maxKeyBytes);
    const verdict = checkResolution(resolution, this.#limits);
    const result = verdict.result && asBuffer(verdict.result.payload);
    const row = await this.#one<{
      o_outcome: string;
      o_id: string | null;
      o_result: Buffer | null;
      o_state: string | null;
      o_fence: string | null;
    }>('hold', [
      key,
      verdict.applied,
      result ?? null,
      verdict.reason,
      verdict.by ?? 'resolve',
      verdict.fence ?? null,
      verdict.identity ?? null,
    ]);
    switch (row.o_outcome) {
      case 'held': {
        const held = await this.#heldVerdict(int(row.o_id));
        if (!held) throw new UnexpectedStoreAnswerError('held verdict vanished');
        return { outcome: 'held', verdict: held };
      }
      default:
        return verdictRefusal(key, verdict.fence, row);
    }
  }

  async heldVerdicts(key: Key): Promise<HeldVerdict[]> {
    if (!this.#storable(key)) return [];
    return (await this.#rows<HeldRow>('heldVerdicts', [key])).map(toHeld);
  }

  async pendingVerdictKeys(limit: number): Promise<Key[]> {
    if (!Number.isSafeInteger(limit) || limit < 0)
      throw new InvalidActionError('limit', `must be a non-negative integer, got ${String(limit)}`);
    return (await this.#rows<{ key: string }>('pendingVerdictKeys', [limit])).map((r) => r.key);
  }

  async judgeVerdict(id: number, judgement: VerdictJudgement): Promise<HeldVerdict | undefined> {
    if (!Number.isSafeInteger(id) || id < 1) return undefined;
    const why = judgement.accept ? null : checkReason(judgement.why, this.#limits);
    const row = await this.#one<{ o_state: string | null }>('judge', [id, judgement.accept, why]);
    if (row.o_state === null) return undefined;
    return this.#heldVerdict(id);
  }

  async #heldVerdict(id: number): Promise<HeldVerdict | undefined> {
    const [row] = await this.#rows<HeldRow>('heldVerdict', [id]);
    return row && toHeld(row);
  }

  async sweep(): Promise<SweepReport> {
    const row = await this.#one<{ o_uncertain: string[]; o_freed: string[] }>('sweep', []);
    return { uncertain: row.o_uncertain, freed: row.o_freed };
  }

  async inspect(key: Key): Promise<KeyRecord | undefined> {
    if (!this.#storable(key)) return undefined;
    const rows = await this.#rows<KeyRow>('inspect', [key]);
    return rows[0] && toRecord(rows[0]);
  }

  async list(filter: ListFilter = {}): Promise<KeyRecord[]> {
    const limit = filter.limit;
    if (limit !== undefined && (!Number.isSafeInteger(limit) || limit < 0)) {
      throw new InvalidActionError('limit', `must be a non-negative integer, got ${String(limit)}`);
    }
    const statement = filter.oldest ? 'listOldest' : 'list';
    const rows = await this.#rows<KeyRow>(statement, [filter.state ?? null, limit ?? null]);
    return rows.map(toRecord);
  }

  async events(key: Key): Promise<KeyEvent[]> {
    if (!this.#storable(key)) return [];
    const rows = await this.#rows<{
      key: string;
      from_state: KeyState;
      to_state: KeyState;
      fence: string;
      reason: string;
      actor: string;
      identity: string | null;
      db_user: string | null;
      at_ms: string;
    }>('events', [key]);
    return rows.map((row) => ({
      key: row.key,
      from: row.from_state,
      to: row.to_state,
      fence: int(row.fence),
      reason: maskConnectionString(row.reason),
      actor: row.actor,
      ...(row.identity === null ? {} : { identity: row.identity }),
      ...(row.db_user === null ? {} : { dbUser: row.db_user }),
      at: int(row.at_ms),
    }));
  }

  async uncertainBacklog(): Promise<UncertainBacklog> {
    const row = await this.#one<{ count: string; oldest_age_ms: string }>('uncertainBacklog', []);
    return { count: int(row.count), oldestAgeMs: Math.max(0, int(row.oldest_age_ms)) };
  }

  /**
   * Deletes in batches of `purgeBatchSize` keys, each batch one short transaction (a key and its
   * events go together), until a batch comes back short: purging millions of keys beside running
   * callers holds neither millions of locks nor one long transaction. Returns the total.
   */
  async purge(options: { olderThanMs: number; force?: boolean }): Promise<number> {
    const olderThanMs = checkPurge(options, this.#limits);
    let total = 0;
    for (;;) {
      const started = performance.now();
      let row: { o_purged: string };
      try {
        row = await this.#one<{ o_purged: string }>('purge', [olderThanMs, this.#purgeBatch]);
      } catch (error) {
        // The schema keeps its own floor for every role but its owner (0013).
        if ((error as { cause?: { code?: unknown } }).cause?.code === 'SE133') {
          throw new PurgeBelowFloorError(olderThanMs, SCHEMA_PURGE_FLOOR_MS, 'owner');
        }
        throw error;
      }
      const purged = int(row.o_purged);
      total += purged;
      if (purged < this.#purgeBatch) return total;
      const rest = (performance.now() - started) * this.#purgeRest;
      if (rest > 0) await new Promise((resolve) => setTimeout(resolve, rest));
    }
  }

  /**
   * Validates an action and the lease presented with it. A lease for another resource cannot be
   * this action's: stale, like the memory store says, without asking the database.
   */
  #leaseAction(action: Action, lease: Lease): Required<Action> {
    const a = checkAction(action, this.#limits);
    if (typeof lease !== 'object' || lease === null || !Number.isSafeInteger(lease.fence)) {
      throw new InvalidActionError('lease', 'must be a lease returned by acquire');
    }
    if (lease.resource !== a.resource) throw new FenceStaleError(a.resource, lease.fence);
    return a;
  }

  #expect(outcome: string, ok: string, resource: string, lease: Lease): void {
    if (outcome === ok) return;
    if (outcome === 'stale') throw new FenceStaleError(resource, lease.fence);
    throw new UnexpectedStoreAnswerError(outcome);
  }

  /** A key the store could never have accepted was never seen: answer so instead of failing. */
  #storable(key: Key): boolean {
    try {
      checkText('key', key, this.#limits.maxKeyBytes);
      return true;
    } catch {
      return false;
    }
  }

  #rows<R extends pg.QueryResultRow>(operation: keyof typeof SQL, values: unknown[]): Promise<R[]> {
    return runStatement<R>(this.#pool, operation, this.#sql[operation], values);
  }

  async #one<R extends pg.QueryResultRow>(
    operation: keyof typeof SQL,
    values: unknown[],
  ): Promise<R> {
    const rows = await this.#rows<R>(operation, values);
    return rows[0]!;
  }
}

interface HeldRow {
  id: string;
  key: string;
  fence: string;
  applied: boolean;
  result: Buffer | null;
  reason: string;
  actor: string;
  identity: string | null;
  state: HeldVerdictState;
  why: string | null;
  at_ms: string;
  judged_at_ms: string | null;
}

function toHeld(row: HeldRow): HeldVerdict {
  return {
    id: int(row.id),
    key: row.key,
    fence: int(row.fence),
    applied: row.applied,
    ...(row.result === null ? {} : { result: { payload: plainBytes(row.result) } }),
    reason: maskConnectionString(row.reason),
    by: row.actor,
    ...(row.identity === null ? {} : { identity: row.identity }),
    state: row.state,
    ...(row.why === null ? {} : { why: maskConnectionString(row.why) }),
    at: int(row.at_ms),
    ...(row.judged_at_ms === null ? {} : { judgedAt: int(row.judged_at_ms) }),
  };
}

function toRecord(row: KeyRow): KeyRecord {
  const record: KeyRecord = {
    key: row.key,
    resource: row.resource,
    state: row.state,
    fence: int(row.fence),
    retrySafety: row.retry_safety,
    updatedAt: int(row.updated_at_ms),
  };
  if (row.result) record.result = { payload: plainBytes(row.result) };
  // Rows stored before reasons were masked on the way in are masked on the way out.
  if (row.reason !== null) record.reason = maskConnectionString(row.reason);
  return record;
}

/** Postgres refused a row because its key exists: a race the store answers by asking again. */
function lostRace(error: unknown): boolean {
  return error instanceof StoreUnavailableError && isUniqueViolation(error.cause);
}

/**
 * Opens a transactional effect's transaction, in one round trip, bounded in the database itself:
 * no statement of it runs and no pause between them lasts longer than the lease's TTL (a frozen
 * or partitioned holder is ended by Postgres, which rolls it back and frees the resource), nor,
 * on Postgres 17 and later, the whole transaction. Its grant waits for the resource row at most
 * `lockTimeout`; the session's own lock_timeout (the second result) is put back after it. The
 * settings are local: they end with the transaction.
 */
function beginTransaction(
  isolation: TransactionIsolation,
  ttlMs: number,
  lockTimeout: string,
  columns: string,
): string {
  const ttl = `'${ttlMs}ms'`;
  return `begin isolation level ${isolation};
    select pg_catalog.current_setting('lock_timeout') as lock_timeout,
      ${SESSION_STATE} as session, pg_catalog.pg_backend_pid() as pid${columns};
    set local lock_timeout = '${lockTimeout}';
    set local statement_timeout = ${ttl};
    set local idle_in_transaction_session_timeout = ${ttl};
    select pg_catalog.set_config('transaction_timeout', ${ttl}, true)
     where pg_catalog.current_setting('server_version_num')::int >= 170000`;
}

/**
 * The least a transactional holder gets past its TTL before the store's own deadline ends it
 * (a holder that took Postgres's cuts away holds at most its TTL plus the larger of its TTL and
 * this).
 */
const DEADLINE_GRACE_MS = 1_000;

/** Attempts of one transactional effect at a stricter isolation before a serialization failure is its answer. */
const SERIALIZATION_ATTEMPTS = 5;

/**
 * Postgres could not serialize the transaction (SQLSTATE 40001), raised by a query, by our own
 * wrapper of it, or by the work's own error wrapping it (anywhere on its `cause` chain).
 */
function isSerializationFailure(error: unknown): boolean {
  const seen = new Set<unknown>();
  for (let at = error; at !== null && typeof at === 'object' && !seen.has(at); ) {
    seen.add(at);
    if ((at as { code?: unknown }).code === '40001') return true;
    at = (at as { cause?: unknown }).cause;
  }
  return false;
}

/** A statement gave up waiting for a row another transaction holds (lockWaitMs): contended. */
function lockWaitExceeded(error: unknown): boolean {
  return error instanceof StoreUnavailableError && isLockNotAvailable(error.cause);
}

/** The commit check of migration 0007 (SQLSTATE SE021): the work tried to commit the store's transaction. */
function isCommitRefused(error: unknown): boolean {
  return (error as { code?: unknown } | undefined)?.code === 'SE021';
}

/**
 * The answers a verdict gets when it decides nothing, alike for resolve_uncertain() and
 * hold_verdict(): the key was already done, is not uncertain, or another attempt is.
 */
function verdictRefusal(
  key: Key,
  fence: number | undefined,
  row: {
    o_outcome: string;
    o_result: Buffer | null;
    o_state: string | null;
    o_fence: string | null;
  },
): { outcome: 'replayed'; applied: true; result: Result } {
  switch (row.o_outcome) {
    case 'replayed':
      return { outcome: 'replayed', applied: true, result: { payload: plainBytes(row.o_result!) } };
    case 'not_uncertain':
      throw new NotUncertainError(key, row.o_state ?? 'unknown');
    case 'stale':
      throw new StaleVerdictError(key, fence!, int(row.o_fence), row.o_state ?? 'unknown');
    default:
      throw new UnexpectedStoreAnswerError(row.o_outcome);
  }
}
