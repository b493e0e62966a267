import type pg from 'pg';
import {
  FenceStaleError,
  InvalidActionError,
  KeyConflictError,
  NotUncertainError,
  OutcomeUnknownError,
  StaleVerdictError,
  StoreUnavailableError,
  UnknownOutcomeError,
} from '../../core/errors.js';
import type { Execution } from '../../core/runner.js';
import type { ListFilter, TransactionalStore, TransactionContext } from '../../core/store.js';
import type {
  Acquisition,
  Action,
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
} from '../../core/types.js';
import {
  checkAction,
  checkBytes,
  checkLeaseTtl,
  checkReason,
  checkResolution,
  checkText,
  checkTtl,
  defaultLimits,
  type Limits,
} from '../../core/validate.js';
import { payloadDigest, transactionalDigest } from '../digest.js';
import { checkout, queryAtReadCommitted, type Session } from './session.js';
import {
  asBuffer,
  DEFAULT_SCHEMA,
  int,
  openPool,
  type PoolOptions,
  plainBytes,
  type Statement,
  statements,
} from './sql.js';

/** How a PgStore connects, where its tables are, and which input it refuses. */
export interface PgStoreOptions extends PoolOptions {
  /**
   * The schema `migrate()` was run on.
   * @default 'sideeffect'
   */
  schema?: string;
  /**
   * Size limits checked before any statement is sent; unset fields keep their default.
   * @default defaultLimits (key 512 B, resource 256 B, payload and result 1 MiB, reason 4 KiB)
   */
  limits?: Partial<Limits>;
}

const keyColumns = (s: string) =>
  `key, resource, state, fence, retry_safety, result, reason, ${s}.epoch_ms(updated_at) as updated_at_ms`;

const SQL = {
  // A done key with this binding is answered by the first branch alone (a replay is one index
  // read, no function call); anything else goes to acquire(), which decides under its locks.
  acquire: (
    s: string,
  ) => `select 'replayed' as o_outcome, null::bigint as o_fence, null::bigint as o_expires_at_ms,
      null::bigint as o_retry_after_ms, result as o_result, null::text as o_reason
    from ${s}.keys where key = $1 and resource = $2 and digest = $3 and state = 'done'
    union all
    select * from ${s}.acquire($1, $2, $3, $4, $5, $6)
    where not exists (select from ${s}.keys where key = $1 and resource = $2 and digest = $3 and state = 'done')`,
  renew: (s: string) => `select * from ${s}.renew($1, $2, $3, $4, $5)`,
  complete: (s: string) => `select * from ${s}.complete($1, $2, $3, $4)`,
  markUncertain: (s: string) => `select ${s}.mark_uncertain($1, $2, $3, $4) as o_outcome`,
  release: (s: string) => `select ${s}.release($1, $2, $3) as o_outcome`,
  resolve: (s: string) => `select * from ${s}.resolve_uncertain($1, $2, $3, $4, $5, $6)`,
  sweep: (s: string) => `select * from ${s}.sweep()`,
  purge: (s: string) => `select ${s}.purge($1) as o_purged`,
  inspect: (s: string) => `select ${keyColumns(s)} from ${s}.keys where key = $1`,
  list: (s: string) => `select ${keyColumns(s)} from ${s}.keys where $1::text is null or state = $1
    order by updated_at desc limit $2`,
  listOldest: (
    s: string,
  ) => `select ${keyColumns(s)} from ${s}.keys where $1::text is null or state = $1
    order by updated_at asc limit $2`,
  txAcquire: (s: string) => `select * from ${s}.tx_acquire($1, $2, $3)`,
  txComplete: (s: string) => `select * from ${s}.tx_complete($1, $2, $3, $4, $5, $6)`,
  binding: (s: string) => `select resource, digest from ${s}.keys where key = $1`,
  uncertainBacklog: (s: string) => `select count(*) as count,
    coalesce(${s}.epoch_ms(${s}.store_now()) - ${s}.epoch_ms(min(updated_at)), 0) as oldest_age_ms
    from ${s}.keys where state = 'uncertain'`,
  events: (s: string) => `select key, from_state, to_state, fence, reason, actor,
    ${s}.epoch_ms(at) as at_ms from ${s}.events where key = $1 order by id`,
};

/** What the acquire statement answers. */
interface AcquireRow {
  o_outcome: string;
  o_fence: string | null;
  o_expires_at_ms: string | null;
  o_retry_after_ms: string | null;
  o_result: Buffer | null;
  o_reason: string | null;
}

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
 * The production Store: the key state machine (docs/architecture.md) in Postgres, one plpgsql function per
 * operation (see migrations/0001_init.sql), so every operation is ONE round trip that decides and
 * writes atomically under row locks, with lease expiry judged by the database clock. Workers on
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
export class PgStore implements TransactionalStore<pg.PoolClient> {
  readonly #pool: pg.Pool;
  readonly #ownsPool: boolean;
  readonly #limits: Limits;
  readonly #sql: Record<keyof typeof SQL, Statement>;

  constructor(options: PgStoreOptions = {}) {
    this.#sql = statements(options.schema ?? DEFAULT_SCHEMA, SQL, {
      named: options.transactionPooling !== true,
    });
    this.#limits = { ...defaultLimits, ...options.limits };
    const { pool, owned } = openPool(options);
    this.#pool = pool;
    this.#ownsPool = owned;
  }

  /** Ends the pool if this store made it; a pool passed in is left to its owner. */
  async close(): Promise<void> {
    if (this.#ownsPool) await this.#pool.end();
  }

  async acquire(
    action: Action,
    ttlMs: number,
    options: { applying?: boolean } = {},
  ): Promise<Acquisition> {
    const a = checkAction(action, this.#limits);
    checkLeaseTtl(ttlMs, this.#limits);
    const digest = payloadDigest(a.payload);
    const row = await this.#one<AcquireRow>('acquire', [
      a.key,
      a.resource,
      digest,
      a.retrySafety,
      ttlMs,
      options.applying === true,
    ]);
    return this.#acquisition(a, ttlMs, row, false);
  }

  async executeInTransaction(
    action: Action,
    ttlMs: number,
    work: (context: TransactionContext<pg.PoolClient>) => Promise<Result>,
    options: { signal?: AbortSignal } = {},
  ): Promise<Execution> {
    const a = checkAction(action, this.#limits);
    checkLeaseTtl(ttlMs, this.#limits);
    const operation = 'executeInTransaction';
    let session: Session;
    try {
      session = await checkout(this.#pool);
    } catch (error) {
      throw new StoreUnavailableError(operation, error);
    }
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
        broken = true;
        throw new StoreUnavailableError(operation, error);
      }
    };
    /** Nothing of this attempt may stay: a rollback that fails means the connection died, which rolls back too. */
    let open = false;
    const rollBack = async (): Promise<void> => {
      await query('rollback').catch(() => {});
      open = false;
    };
    const commit = async (): Promise<pg.QueryResult> => {
      const committed = await query('commit');
      open = false;
      return committed;
    };
    try {
      await query('begin isolation level read committed');
      open = true;
      const digest = transactionalDigest(a.payload);
      const granted = await query<AcquireRow>(this.#sql.txAcquire, [a.key, a.resource, digest]);
      const row = granted.rows[0]!;
      if (row.o_outcome !== 'applied') {
        // A conflict ends the transaction before the binding is looked up on another connection;
        // anything else keeps what acquire concluded on the way (an expired holder).
        if (row.o_outcome.startsWith('conflict:')) await rollBack();
        else await commit();
        const acquisition = await this.#acquisition(a, ttlMs, row, true);
        return acquisition.outcome === 'uncertain'
          ? {
              outcome: 'uncertain',
              reason: acquisition.reason,
              error: new OutcomeUnknownError(a.key, a.resource, acquisition.reason),
            }
          : (acquisition as Execution);
      }
      const fence = int(row.o_fence);
      let payload: Uint8Array;
      let completedAt: number;
      try {
        options.signal?.throwIfAborted();
        const result = await work({
          tx: client,
          key: a.key,
          fence,
          signal: options.signal ?? new AbortController().signal,
        });
        payload = checkBytes('result', result?.payload, this.#limits.maxPayloadBytes);
        const completed = await query<{ o_outcome: string; o_at_ms: string }>(
          this.#sql.txComplete,
          [a.key, a.resource, digest, fence, a.retrySafety, asBuffer(payload)],
        );
        if (completed.rows[0]!.o_outcome !== 'completed') {
          await rollBack();
          return { outcome: 'failed', error: await this.#conflict(a, true) };
        }
        completedAt = int(completed.rows[0]!.o_at_ms);
      } catch (error) {
        // Before commit nothing is visible to anyone: rolled back, the effect did not happen.
        await rollBack();
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
      // A connection left inside a transaction (an unexpected throw) must not go back to the pool.
      session.release(broken || open);
    }
  }

  /** Turns acquire's row into an Acquisition; a conflict says whether it is the other execution mode. */
  async #acquisition(
    a: Required<Action>,
    ttlMs: number,
    row: AcquireRow,
    transactional: boolean,
  ): Promise<Acquisition> {
    switch (row.o_outcome) {
      case 'applied':
        return {
          outcome: 'applied',
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
        return { outcome: 'uncertain', reason: row.o_reason ?? '' };
      case 'conflict:resource':
      case 'conflict:payload':
        throw await this.#conflict(a, transactional);
      default:
        throw new UnknownOutcomeError(row.o_outcome);
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
    const row = await this.#one<{ o_outcome: string; o_expires_at_ms: string | null }>('renew', [
      a.key,
      a.resource,
      lease.fence,
      ttlMs,
      options.applying === true,
    ]);
    this.#expect(row.o_outcome, 'renewed', a.resource, lease);
    return { ...lease, ttlMs, expiresAt: int(row.o_expires_at_ms) };
  }

  async complete(action: Action, lease: Lease, result: Result): Promise<Result> {
    const payload = checkBytes('result', result?.payload, this.#limits.maxPayloadBytes);
    const a = this.#leaseAction(action, lease);
    const row = await this.#one<{ o_outcome: string; o_result: Buffer | null }>('complete', [
      a.key,
      a.resource,
      lease.fence,
      asBuffer(payload),
    ]);
    if (row.o_outcome === 'replayed') return { payload: plainBytes(row.o_result!) };
    this.#expect(row.o_outcome, 'completed', a.resource, lease);
    return { payload: plainBytes(payload) };
  }

  async markUncertain(action: Action, lease: Lease, reason: string): Promise<void> {
    checkReason(reason, this.#limits);
    const a = this.#leaseAction(action, lease);
    const row = await this.#one<{ o_outcome: string }>('markUncertain', [
      a.key,
      a.resource,
      lease.fence,
      reason,
    ]);
    this.#expect(row.o_outcome, 'marked', a.resource, lease);
  }

  async release(action: Action, lease: Lease): Promise<void> {
    const a = this.#leaseAction(action, lease);
    const row = await this.#one<{ o_outcome: string }>('release', [a.key, a.resource, lease.fence]);
    this.#expect(row.o_outcome, 'released', a.resource, lease);
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
    ]);
    switch (row.o_outcome) {
      case 'resolved':
        return verdict.applied
          ? { outcome: 'resolved', applied: true, result: { payload: plainBytes(result!) } }
          : { outcome: 'resolved', applied: false };
      case 'replayed':
        return {
          outcome: 'replayed',
          applied: true,
          result: { payload: plainBytes(row.o_result!) },
        };
      case 'not_uncertain':
        throw new NotUncertainError(key, row.o_state ?? 'unknown');
      case 'stale':
        throw new StaleVerdictError(
          key,
          verdict.fence!,
          int(row.o_fence),
          row.o_state ?? 'unknown',
        );
      default:
        throw new UnknownOutcomeError(row.o_outcome);
    }
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
      at_ms: string;
    }>('events', [key]);
    return rows.map((row) => ({
      key: row.key,
      from: row.from_state,
      to: row.to_state,
      fence: int(row.fence),
      reason: row.reason,
      actor: row.actor,
      at: int(row.at_ms),
    }));
  }

  async uncertainBacklog(): Promise<UncertainBacklog> {
    const row = await this.#one<{ count: string; oldest_age_ms: string }>('uncertainBacklog', []);
    return { count: int(row.count), oldestAgeMs: Math.max(0, int(row.oldest_age_ms)) };
  }

  async purge(options: { olderThanMs: number }): Promise<number> {
    const olderThanMs = checkTtl(options?.olderThanMs);
    const row = await this.#one<{ o_purged: string }>('purge', [olderThanMs]);
    return int(row.o_purged);
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
    throw new UnknownOutcomeError(outcome);
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

  async #rows<R extends pg.QueryResultRow>(
    operation: keyof typeof SQL,
    values: unknown[],
  ): Promise<R[]> {
    let session: Session;
    try {
      session = await checkout(this.#pool);
    } catch (error) {
      throw new StoreUnavailableError(operation, error);
    }
    let failed = false;
    try {
      return await queryAtReadCommitted<R>(session.client, this.#sql[operation], values);
    } catch (error) {
      failed = true;
      throw new StoreUnavailableError(operation, error);
    } finally {
      session.release(failed);
    }
  }

  async #one<R extends pg.QueryResultRow>(
    operation: keyof typeof SQL,
    values: unknown[],
  ): Promise<R> {
    const rows = await this.#rows<R>(operation, values);
    return rows[0]!;
  }
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
  if (row.reason !== null) record.reason = row.reason;
  return record;
}
