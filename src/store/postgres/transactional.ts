import type pg from 'pg';
import {
  InvalidActionError,
  OutcomeUncertainError,
  StoreUnavailableError,
  TransactionEndedError,
  TransactionMisuseError,
} from '../../core/errors.js';
import type { Execution } from '../../core/runner.js';
import {
  TRANSACTION_ISOLATIONS,
  type TransactionContext,
  type TransactionIsolation,
  type TransactionOptions,
} from '../../core/store.js';
import type { Acquisition, Action, Key, Result } from '../../core/types.js';
import { checkAction, checkBytes, checkLeaseTtl, type Limits } from '../../core/validate.js';
import { transactionalDigest } from '../digest.js';
import { AttemptConnection, type Binding, type Opened } from './attempt-connection.js';
import { type AcquireRow, FIRST_LOOK, GRANTED_ROW } from './key-statements.js';
import { checkoutFor, lockWaitExceeded } from './session.js';
import { int, plainBytes, quoteSchema } from './sql.js';
import {
  armDeadline,
  guardedClient,
  guardedStatementsSent,
  knownBaseline,
  POOLED_BASELINE,
  rememberBaseline,
  runAsTransactionalWork,
  SESSION_BASELINE,
} from './transaction-guard.js';
import { finishRefusal } from './transaction-sql.js';
import type { ResourceWaiters, WaiterPass } from './waiters.js';

/** A transactional attempt that found its key committed by another caller: asked again. */
const LOST_RACE = Symbol('lost race');

/** A transactional attempt whose grant gave up waiting for the resource's row. */
const ROW_HELD = Symbol('row held');

/** What the transactional path shares with the PgStore that delegates to it. */
export interface TransactionalParts {
  pool: pg.Pool;
  schema: string;
  limits: Limits;
  lockWaitMs: number;
  waiters: ResourceWaiters;
  transactionPooling: boolean;
  /**
   * The store's Acquisition for a grant's answer (a conflict says which part of the binding
   * differs, read by `binding` on the attempt's own connection).
   */
  acquisition(
    a: Required<Action>,
    ttlMs: number,
    row: AcquireRow,
    transactional: boolean,
    binding: (key: Key) => Promise<Binding | undefined>,
  ): Promise<Acquisition>;
}

/**
 * PgStore's executeInTransaction: the effect's work in the caller's transaction, granted, recorded
 * done and committed with it, so the effect and its key commit or roll back together.
 */
export class PgTransactional {
  readonly #parts: TransactionalParts;
  /** lockWaitMs as the value of Postgres's `lock_timeout`. */
  readonly #lockTimeout: string;
  /** The store's schema, quoted. */
  readonly #schema: string;

  constructor(parts: TransactionalParts) {
    this.#parts = parts;
    this.#schema = quoteSchema(parts.schema);
    this.#lockTimeout = `${parts.lockWaitMs}ms`;
  }

  async execute(
    action: Action,
    ttlMs: number,
    work: (context: TransactionContext<pg.PoolClient>) => Promise<Result>,
    options: TransactionOptions = {},
  ): Promise<Execution> {
    const a = checkAction(action, this.#parts.limits);
    checkLeaseTtl(ttlMs, this.#parts.limits);
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
    const pass = this.#parts.waiters.enter(a.resource);
    if (!pass) return this.#parts.waiters.turnedAway(a.resource);
    try {
      const once = (lockTimeout: string) =>
        this.#transactionOnce(a, ttlMs, work, signal, isolation, lockTimeout, pass.leave);
      // A busy resource's place waits from the start; anyone else first looks.
      if (pass.placed) return this.#afterWait(await once(this.#lockTimeout), pass);
      const first = await once(FIRST_LOOK);
      if (first !== ROW_HELD) return first;
      if (!pass.held()) return this.#parts.waiters.turnedAway(a.resource);
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
    return { outcome: 'contended', retryAfterMs: this.#parts.lockWaitMs };
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
    const connection = new AttemptConnection(
      await checkoutFor(this.#parts.pool, 'executeInTransaction'),
      { pooled: this.#parts.transactionPooling, schema: this.#schema },
    );
    const { client } = connection;
    let deadline: ReturnType<typeof armDeadline> | undefined;
    try {
      // The grant's lock wait ends before the TTL's statement cut does: a caller with a TTL
      // below lockWaitMs is told contended, not "store unavailable".
      // A first look (FIRST_LOOK) waits less than that already.
      const lockWait =
        lockTimeout === FIRST_LOOK
          ? lockTimeout
          : `${Math.max(1, Math.min(this.#parts.lockWaitMs, Math.floor(ttlMs / 2)))}ms`;
      const known = this.#parts.transactionPooling ? POOLED_BASELINE : knownBaseline(client);
      const digest = transactionalDigest(a.payload);
      const startedAt = performance.now();
      let opened: Opened;
      try {
        opened = await connection.open({
          isolation,
          key: a.key,
          resource: a.resource,
          digest,
          ttlMs,
          lockWait,
          ...(known ? {} : { baseline: SESSION_BASELINE }),
        });
      } catch (error) {
        if (!lockWaitExceeded(error)) throw error;
        // The resource's row is held by another transaction (a transactional holder) past the bound.
        await connection.rollBack();
        return ROW_HELD;
      }
      const baseline = known ?? rememberBaseline(client, opened.baseline!);
      // Answered: the work that may follow is no wait, and does not count as one.
      answered();
      if (opened.o_outcome !== GRANTED_ROW) {
        // No other answer keeps a write; the transaction ends before a conflict's binding is
        // looked up, on this same connection (never a second one while this one is held).
        await connection.rollBack();
        const acquisition = await this.#parts.acquisition(
          a,
          ttlMs,
          { ...opened, o_expires_at_ms: null },
          true,
          (key) => connection.binding(key),
        );
        return acquisition.outcome === 'uncertain'
          ? {
              outcome: 'uncertain',
              reason: acquisition.reason,
              error: new OutcomeUncertainError(a.key, a.resource, acquisition.reason),
            }
          : (acquisition as Execution);
      }
      const fence = int(opened.o_fence);
      let payload: Uint8Array;
      /** The first statement of the work that would have ended the transaction, refused. */
      let ended: TransactionEndedError | undefined;
      const tx = guardedClient(
        client,
        a.key,
        (error) => {
          ended ??= error;
        },
        () => connection.mayPrepare(),
      );
      // Whatever the work sets (statement_timeout = 0), the transaction ends. Postgres's own cuts
      // (each statement and pause at the TTL) stay the bound of work that leaves them alone; this
      // one, measured by a process that may itself be descheduled, leaves them the time to act
      // first: a whole transaction of a few round trips on a loaded machine can outlast a TTL of
      // tens of milliseconds without any of its statements doing so.
      deadline = armDeadline(this.#parts.pool, {
        pid: opened.o_pid,
        xid: opened.o_xid,
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
        await guardedStatementsSent(client);
        // A refused end of the transaction is the answer, whatever the work did after it.
        if (ended) {
          await connection.rollBack();
          return { outcome: 'failed', error: ended };
        }
        if (thrown) throw thrown.error;
        payload = checkBytes('result', result?.payload, this.#parts.limits.maxPayloadBytes);
      } catch (error) {
        // Before commit nothing is visible to anyone: rolled back, the effect did not happen.
        await connection.rollBack();
        if (isCommitRefused(error)) {
          return { outcome: 'failed', error: new TransactionEndedError(a.key, { cause: error }) };
        }
        // Unless the key was committed meanwhile by another caller (on another resource, so no
        // lock told this one): then its failure was that commit's work seen, and the caller is
        // owed the key's answer (a replay, a conflict), not `failed`.
        // Asked on this connection: a store that cannot answer says no.
        if (!connection.broken && (await connection.binding(a.key).catch(() => undefined)))
          return LOST_RACE;
        return { outcome: 'failed', error };
      }
      // The deadline stands down before the COMMIT is sent: ended while the COMMIT waits for a
      // synchronous standby, the backend keeps the commit locally, unreplicated, and the key reads
      // done on a primary whose failover rolls it back. From here the key stays busy (its rows
      // locked) until the standby confirms. A deadline that fired already may still land: rolled
      // back first, the attempt ends as a TTL cut does.
      deadline.disarm();
      if (deadline.fired) await connection.rollBack();
      // The server ended the backend while the work ran (a TTL cut of its idle transaction):
      // rolled back with it, known before the finish is sent, so a definite failure, never
      // "may have committed".
      if (connection.lost || deadline.fired) {
        return {
          outcome: 'failed',
          error: new StoreUnavailableError(
            'executeInTransaction',
            new Error(
              'the connection was ended before the transaction was finished (the TTL cut it): rolled back, nothing recorded',
              { cause: connection.lostCause },
            ),
          ),
        };
      }
      let completedAt: string;
      try {
        completedAt = await connection.finish({
          key: a.key,
          resource: a.resource,
          digest,
          fence,
          retrySafety: a.retrySafety,
          result: payload,
          xid: opened.o_xid,
          ttlMs,
          remainingMs: ttlMs - (performance.now() - startedAt),
          baseline,
          temp: opened.o_temp,
          prepared: opened.o_prepared,
        });
      } catch (error) {
        return await this.#unfinished(error, a, fence, ttlMs, payload, connection);
      }
      // The lease ended with the commit that recorded the result.
      const lease = { resource: a.resource, fence, ttlMs, expiresAt: int(completedAt) };
      return { outcome: 'applied', result: { payload: plainBytes(payload) }, lease };
    } finally {
      // A connection left inside a transaction (an unexpected throw) must not go back to the pool,
      // nor one whose session the work changed: the pool's next user would inherit its role,
      // search_path or timeouts. Discarded, it is replaced by a fresh one.
      deadline?.disarm();
      connection.release(deadline?.fired === true);
    }
  }

  /**
   * The answer of an attempt whose finish (the key's write, COMMIT and the session's reset, one
   * round trip) failed. A refusal of tx_settle() came before the COMMIT. Any other error with the
   * connection still there either came before the COMMIT or from the COMMIT itself (a deferred
   * check's or a serialization failure rolls it back): nothing committed, unless the key is found
   * recorded at this attempt's fence (a statement of the reset after the COMMIT failed): then the
   * effect is applied. A connection lost on the way may have committed: thrown, as the COMMIT's
   * own failure always was, never called `failed`.
   */
  async #unfinished(
    error: unknown,
    a: Required<Action>,
    fence: number,
    ttlMs: number,
    payload: Uint8Array,
    connection: AttemptConnection,
  ): Promise<Execution | typeof LOST_RACE> {
    const refusal = finishRefusal(error);
    const rolledBack = await connection.rollBack();
    switch (refusal?.code) {
      case 'SE161':
        return LOST_RACE;
      case 'SE162':
        if (rolledBack) await connection.burnFence(a.resource, fence);
        return { outcome: 'failed', error: new TransactionEndedError(a.key) };
      case 'SE163':
        return {
          outcome: 'failed',
          error: new TransactionMisuseError(
            a.key,
            'session-state',
            `behind a transaction-mode pooler the work may change only transaction-local state; it left ${refusal.detail}, which the pooler's next client would get`,
          ),
        };
      case 'SE164':
        return {
          outcome: 'failed',
          error: new TransactionMisuseError(
            a.key,
            'commit-settings',
            `the work set ${refusal.detail}: the store's record of the key would commit without its triggers`,
            { cause: error },
          ),
        };
    }
    if (!rolledBack) throw error;
    const committedAt = await connection.recorded(a.key, fence);
    if (committedAt !== undefined) {
      const lease = { resource: a.resource, fence, ttlMs, expiresAt: int(committedAt) };
      return { outcome: 'applied', result: { payload: plainBytes(payload) }, lease };
    }
    if (!rolledBack) throw error;
    return { outcome: 'failed', error };
  }
}

/**
 * The least a transactional holder gets past its TTL before the store's own deadline ends it
 * (a holder that took Postgres's cuts away holds at most its TTL plus the larger of its TTL and
 * this, and then the time its COMMIT waits for a synchronous standby).
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

/** The commit check of migration 0007 (SQLSTATE SE021): the work tried to commit the store's transaction. */
function isCommitRefused(error: unknown): boolean {
  return (error as { code?: unknown } | undefined)?.code === 'SE021';
}
