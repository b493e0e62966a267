import type pg from 'pg';
import type {
  BreakerAdmission,
  BreakerAnswer,
  BreakerCommand,
  BreakerOutcome,
  BreakerPolicy,
  BreakerRecord,
  BreakerStore,
  BreakerTransition,
} from '../../core/breaker.js';
import {
  FenceStaleError,
  InvalidActionError,
  KeyConflictError,
  PurgeBelowFloorError,
  StoreUnavailableError,
  UnexpectedStoreAnswerError,
} from '../../core/errors.js';
import { maskConnectionString } from '../../core/mask.js';
import type { Execution } from '../../core/runner.js';
import type {
  ListFilter,
  PendingVerdictStore,
  TransactionalStore,
  TransactionContext,
  TransactionOptions,
} from '../../core/store.js';
import type {
  Acquisition,
  Action,
  Fence,
  Key,
  KeyEvent,
  KeyRecord,
  KeyState,
  Lease,
  Result,
  SweepReport,
  UncertainBacklog,
} from '../../core/types.js';
import {
  checkAction,
  checkBytes,
  checkLeaseTtl,
  checkPurge,
  checkReason,
  defaultLimits,
  type Limits,
  storableKey,
} from '../../core/validate.js';
import type {
  PendingVerdict,
  PendingVerdictOutcome,
  PendingVerdictPage,
  Resolution,
  ResolveOutcome,
  VerdictJudgement,
  Withdrawal,
} from '../../core/verdict.js';
import { payloadDigest, transactionalDigest } from '../digest.js';
import type { Binding } from './attempt-connection.js';
import { PgBreakers } from './breakers.js';
import { checkDurability, type Durability, type DurabilityReport } from './durability.js';
import { type AcquireCall, batchLimits, type HolderCall, KeyBatches } from './key-batches.js';
import {
  type AcquireHit,
  type AcquireRow,
  FIRST_LOOK,
  fromJson,
  GRANTED_ROW,
  HELD_ROW,
  KEY_SQL,
  type KeyRow,
  toRecord,
} from './key-statements.js';
import { type MigrationStatus, migrationStatus } from './migrate.js';
import {
  PgPendingVerdicts,
  type VerdictRow,
  verdictRefusal,
  verdictValues,
} from './pending-verdicts.js';
import {
  isUniqueViolation,
  lockWaitExceeded,
  type StatementRunner,
  statementRunner,
} from './session.js';
import { asBuffer, defaultSchema, int, openPool, plainBytes, statements } from './sql.js';
import { checkPgStoreOptions, type PgStoreOptions } from './store-options.js';
import { SweepLeader } from './sweep-leader.js';
import { PgTransactional } from './transactional.js';
import { ResourceWaiters } from './waiters.js';

/** node-postgres's pool size when none is given. */
const POOL_DEFAULT_MAX = 10;

/** A first look that found the resource's row held (a shared statement's `held`). */
const ROW_FOUND_HELD = Symbol('row found held');

/** The floor purge_batch() keeps in the schema for every role but the schema's owner (0013). */
const SCHEMA_PURGE_FLOOR_MS = 7 * 24 * 60 * 60 * 1000;

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
export class PgStore
  implements TransactionalStore<pg.PoolClient>, PendingVerdictStore, BreakerStore
{
  readonly #pool: pg.Pool;
  readonly #ownsPool: boolean;
  readonly #limits: Limits;
  readonly #schema: string;
  readonly #rows: StatementRunner<keyof typeof KEY_SQL>;
  readonly #transactionPooling: boolean;
  readonly #purgeBatch: number;
  /** Rest after a purge batch, per millisecond the batch took. */
  readonly #purgeRest: number;
  readonly #lockWaitMs: number;
  /** lockWaitMs as the value of Postgres's `lock_timeout`. */
  readonly #lockTimeout: string;
  /** This store's acquire calls in flight per resource (waitersPerResource). */
  readonly #waiters: ResourceWaiters;
  readonly #sweep: SweepLeader;
  readonly #verdicts: PgPendingVerdicts;
  readonly #breakers: PgBreakers;
  readonly #transactional: PgTransactional;
  /** The calls that may share statements (batching), and their one-key paths. */
  readonly #batches: KeyBatches;

  constructor(options: PgStoreOptions = {}) {
    const { batch, duty, lockWaitMs, waiters } = checkPgStoreOptions(options);
    this.#purgeBatch = batch;
    this.#purgeRest = (1 - duty) / duty;
    this.#lockWaitMs = lockWaitMs;
    this.#lockTimeout = `${lockWaitMs}ms`;
    this.#schema = options.schema ?? defaultSchema();
    this.#transactionPooling = options.transactionPooling === true;
    const named = !this.#transactionPooling;
    const keySql = statements(this.#schema, KEY_SQL, { named });
    this.#limits = { ...defaultLimits, ...options.limits };
    const { pool, owned } = openPool(options);
    this.#pool = pool;
    this.#ownsPool = owned;
    this.#waiters = new ResourceWaiters(waiters, lockWaitMs, pool.options.max ?? POOL_DEFAULT_MAX);
    this.#rows = statementRunner(pool, keySql);
    this.#batches = new KeyBatches({
      pool,
      schema: this.#schema,
      named,
      limits: batchLimits(options.batching),
      rows: this.#rows,
      lockWaitMs,
      acquireAlone: (call) => this.#askAcquire(call, FIRST_LOOK),
    });
    this.#sweep = new SweepLeader(pool, this.#schema, this.#transactionPooling);
    this.#verdicts = new PgPendingVerdicts(pool, this.#schema, this.#limits, named);
    this.#breakers = new PgBreakers(pool, this.#schema, this.#limits, named);
    this.#transactional = new PgTransactional({
      pool,
      schema: this.#schema,
      limits: this.#limits,
      lockWaitMs,
      waiters: this.#waiters,
      transactionPooling: this.#transactionPooling,
      acquisition: (a, ttlMs, row, transactional, binding) =>
        this.#acquisition(a, ttlMs, row, transactional, binding),
    });
  }

  /**
   * Which migrations this store's schema has and which it lacks ({@link migrationStatus}), so
   * `SideEffectPlugin` refuses to start a worker on a schema nobody migrated, with the fix,
   * instead of its activities retrying "relation does not exist" for ever.
   */
  migrationStatus(): Promise<MigrationStatus> {
    return migrationStatus(this.#pool, { schema: this.#schema });
  }

  /**
   * {@link checkDurability} on this store's pool, so `SideEffectPlugin` refuses to start a worker
   * on a standby, or on a setup whose failover can lose an acknowledged commit (and with it apply
   * an effect twice), unless its `durability` option declares the setup.
   */
  checkDurability(durability?: Durability): Promise<DurabilityReport> {
    return checkDurability(this.#pool, durability === undefined ? {} : { durability });
  }

  /** Gives up any sweep leadership, then ends the pool if this store made it; a pool passed in is left to its owner. */
  async close(): Promise<void> {
    await this.#sweep.resignAll();
    if (this.#ownsPool) await this.#pool.end();
  }

  claimReconciles(options: { limit: number; restartAfterMs: number }): Promise<KeyRecord[]> {
    return this.#sweep.claimReconciles(options);
  }

  /**
   * Leader by an advisory lock per schema, held on one pooled connection for as long as the
   * owner leads (that connection is not available to other work meanwhile). A leader whose
   * process or connection dies loses the lock with its session. Through a transaction-mode
   * pooler a session lock would stay on a server connection that other clients then share, so
   * there the lock is transaction-scoped and the leader keeps its transaction open: an open
   * transaction pins one server connection to it.
   */
  leadSweep(owner: object, onLost?: () => void): Promise<boolean> {
    return this.#sweep.leadSweep(owner, onLost);
  }

  resignSweep(owner: object): Promise<void> {
    return this.#sweep.resignSweep(owner);
  }

  admitAttempt(policy: BreakerPolicy, key: Key): Promise<BreakerAdmission> {
    return this.#breakers.admitAttempt(policy, key);
  }

  recordOutcome(
    policy: BreakerPolicy,
    attempt: { key: Key; fence: Fence; outcome: BreakerOutcome },
  ): Promise<BreakerAnswer> {
    return this.#breakers.recordOutcome(policy, attempt);
  }

  setBreaker(group: string, command: BreakerCommand): Promise<BreakerAnswer> {
    return this.#breakers.setBreaker(group, command);
  }

  breaker(group: string): Promise<BreakerRecord | undefined> {
    return this.#breakers.breaker(group);
  }

  breakers(): Promise<BreakerRecord[]> {
    return this.#breakers.breakers();
  }

  breakerEvents(group: string): Promise<BreakerTransition[]> {
    return this.#breakers.breakerEvents(group);
  }

  async acquire(
    action: Action,
    ttlMs: number,
    options: { applying?: boolean } = {},
  ): Promise<Acquisition> {
    const a = checkAction(action, this.#limits);
    checkLeaseTtl(ttlMs, this.#limits);
    const call: AcquireCall = {
      key: a.key,
      resource: a.resource,
      digest: payloadDigest(a.payload),
      retrySafety: a.retrySafety,
      ttlMs,
      applying: options.applying === true,
    };
    const pass = this.#waiters.enter(a.resource);
    if (!pass) return this.#waiters.turnedAway(a.resource);
    let answer: AcquireRow;
    try {
      try {
        // A busy resource's place waits alone; a first look may share a statement (batching).
        answer = pass.placed
          ? await this.#askAcquire(call, this.#lockTimeout)
          : await this.#batches.acquire(call);
        // A shared statement found the row held without waiting: the first look's answer.
        if (answer.o_outcome === HELD_ROW) throw ROW_FOUND_HELD;
      } catch (error) {
        if (error !== ROW_FOUND_HELD && !lockWaitExceeded(error)) throw error;
        if (pass.placed) {
          pass.held();
          return { outcome: 'contended', retryAfterMs: this.#lockWaitMs };
        }
        // The resource's row is held: waited for by at most waitersPerResource of these calls.
        if (!pass.held()) return this.#waiters.turnedAway(a.resource);
        try {
          answer = await this.#askAcquire(call, this.#lockTimeout);
        } catch (error) {
          if (!lockWaitExceeded(error)) throw error;
          pass.held();
          return { outcome: 'contended', retryAfterMs: this.#lockWaitMs };
        }
      }
    } finally {
      pass.leave();
    }
    return this.#acquisition(a, ttlMs, answer, false);
  }

  /** The acquire statement for one key; a fresh grant that lost a race is asked once more. */
  async #askAcquire(call: AcquireCall, lockTimeout: string): Promise<AcquireRow> {
    const { key, resource, digest, retrySafety, ttlMs, applying } = call;
    const values = [key, resource, digest, retrySafety, ttlMs, applying, lockTimeout];
    let hit: AcquireHit;
    try {
      hit = (await this.#rows<AcquireHit>('acquire', values))[0]!;
    } catch (error) {
      if (!lostRace(error)) throw error;
      // Asked once more, acquire_fresh() now sees the key and leaves it to acquire(), which
      // judges it under the locks.
      hit = (await this.#rows<AcquireHit>('acquire', values))[0]!;
    }
    if (hit.o_fresh) return fromJson(hit.o_fresh);
    return {
      o_outcome: 'replayed',
      o_fence: null,
      o_expires_at_ms: null,
      o_retry_after_ms: null,
      o_result: hit.o_result,
      o_reason: null,
    };
  }

  executeInTransaction(
    action: Action,
    ttlMs: number,
    work: (context: TransactionContext<pg.PoolClient>) => Promise<Result>,
    options: TransactionOptions = {},
  ): Promise<Execution> {
    return this.#transactional.execute(action, ttlMs, work, options);
  }

  /** Turns acquire's row into an Acquisition; a conflict says whether it is the other execution mode. */
  async #acquisition(
    a: Required<Action>,
    ttlMs: number,
    row: AcquireRow,
    transactional: boolean,
    binding?: (key: Key) => Promise<Binding | undefined>,
  ): Promise<Acquisition> {
    switch (row.o_outcome) {
      case GRANTED_ROW:
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
        throw await this.#conflict(a, transactional, binding);
      default:
        throw new UnexpectedStoreAnswerError(row.o_outcome);
    }
  }

  /** Which part of the key's binding differs: its resource, the other execution mode, or the payload. */
  async #conflict(
    a: Required<Action>,
    transactional: boolean,
    binding: (key: Key) => Promise<Binding | undefined> = async (key) =>
      (await this.#rows<Binding>('binding', [key]))[0],
  ): Promise<KeyConflictError> {
    const bound = await binding(a.key);
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
    const { o_outcome, o_expires_at_ms } = await this.#batches.renew({
      ...held(a, lease),
      ttlMs,
      applying: options.applying === true,
    });
    this.#expect(o_outcome, 'renewed', a.resource, lease);
    return { ...lease, ttlMs, expiresAt: int(o_expires_at_ms) };
  }

  async complete(action: Action, lease: Lease, result: Result): Promise<Result> {
    const payload = checkBytes('result', result?.payload, this.#limits.maxPayloadBytes);
    const a = this.#leaseAction(action, lease);
    const { o_outcome, o_result } = await this.#batches.complete({
      ...held(a, lease),
      result: asBuffer(payload),
    });
    if (o_outcome === 'replayed') return { payload: plainBytes(o_result!) };
    this.#expect(o_outcome, 'completed', a.resource, lease);
    return { payload: plainBytes(payload) };
  }

  async markUncertain(action: Action, lease: Lease, reason: string): Promise<void> {
    const masked = checkReason(reason, this.#limits);
    const a = this.#leaseAction(action, lease);
    const { o_outcome } = await this.#batches.markUncertain({ ...held(a, lease), reason: masked });
    this.#expect(o_outcome, 'marked', a.resource, lease);
  }

  async release(action: Action, lease: Lease): Promise<void> {
    const a = this.#leaseAction(action, lease);
    const { o_outcome } = await this.#batches.release(held(a, lease));
    this.#expect(o_outcome, 'released', a.resource, lease);
  }

  async resolveUncertain(key: Key, resolution: Resolution): Promise<ResolveOutcome> {
    const { verdict, result, values } = verdictValues(key, resolution, this.#limits);
    const row = await this.#one<VerdictRow>('resolve', values);
    switch (row.o_outcome) {
      case 'resolved':
        return verdict.applied
          ? { outcome: 'resolved', applied: true, result: { payload: plainBytes(result!) } }
          : { outcome: 'resolved', applied: false };
      default:
        return verdictRefusal(key, verdict.fence, row);
    }
  }

  addPendingVerdict(key: Key, resolution: Resolution): Promise<PendingVerdictOutcome> {
    return this.#verdicts.addPendingVerdict(key, resolution);
  }

  pendingVerdicts(key: Key, page?: PendingVerdictPage): Promise<PendingVerdict[]> {
    return this.#verdicts.pendingVerdicts(key, page);
  }

  pendingVerdictCounts(keys: Key[]): Promise<Map<Key, number>> {
    return this.#verdicts.pendingVerdictCounts(keys);
  }

  withdrawPendingVerdict(
    key: Key,
    id: number,
    withdrawal: Withdrawal,
  ): Promise<{ withdrawn: boolean; verdict: PendingVerdict } | undefined> {
    return this.#verdicts.withdrawPendingVerdict(key, id, withdrawal);
  }

  pendingVerdictKeys(limit: number): Promise<Key[]> {
    return this.#verdicts.pendingVerdictKeys(limit);
  }

  judgeVerdict(id: number, judgement: VerdictJudgement): Promise<PendingVerdict | undefined> {
    return this.#verdicts.judgeVerdict(id, judgement);
  }

  sweep(): Promise<SweepReport> {
    return this.#sweep.sweep();
  }

  async inspect(key: Key): Promise<KeyRecord | undefined> {
    if (!storableKey(key, this.#limits)) return undefined;
    const row = await this.#batches.inspect(key);
    return row && toRecord(row);
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
    if (!storableKey(key, this.#limits)) return [];
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
      by: row.actor,
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

  async #one<R extends pg.QueryResultRow>(
    operation: keyof typeof KEY_SQL,
    values: unknown[],
  ): Promise<R> {
    const rows = await this.#rows<R>(operation, values);
    return rows[0]!;
  }
}

/** The key, resource and fence a holder's call presents. */
function held(a: Required<Action>, lease: Lease): HolderCall {
  return { key: a.key, resource: a.resource, fence: lease.fence };
}

/** Postgres refused a row because its key exists: a race the store answers by asking again. */
function lostRace(error: unknown): boolean {
  return error instanceof StoreUnavailableError && isUniqueViolation(error.cause);
}
