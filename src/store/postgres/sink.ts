import type pg from 'pg';
import {
  ContendedError,
  FenceStaleError,
  InvalidActionError,
  markNotApplied,
  StoreMisconfiguredError,
  StoreUnavailableError,
} from '../../core/errors.js';
import type { FencedSink } from '../../core/store.js';
import type { Fence } from '../../core/types.js';
import { checkText, defaultLimits, type Limits } from '../../core/validate.js';
import { checkoutFor, isLockNotAvailable, runStatement, storeError } from './session.js';
import {
  defaultSchema,
  int,
  openPool,
  type PoolOptions,
  type Statement,
  statements,
} from './sql.js';
import { refuseInsideTransactionalWork } from './transaction-guard.js';

/** How a PgFencedSink connects and where its fence table is (the schema `migrate()` created). */
export interface PgFencedSinkOptions extends PoolOptions {
  /**
   * The schema holding `sink_fences` (created by `migrate()`): the schema of the store whose
   * leases it checks. A fence that schema's store never issued is refused with
   * StoreMisconfiguredError (nothing written): a sink on another schema would not see the marks
   * transactional grants raise, and a paused holder's stale write could land after a newer one.
   * @default `SIDEEFFECT_SCHEMA`, else 'sideeffect'
   */
  schema?: string;
  /**
   * Longest resource name accepted, as in the store.
   * @default { maxResourceBytes: 256 }
   */
  limits?: Partial<Pick<Limits, 'maxResourceBytes'>>;
  /**
   * The longest `writeFenced` waits for its resource's mark while another transaction holds it
   * (a transactional holder keeps it for its whole work, a concurrent write until it commits)
   * before it gives up: ContendedError (retryable), marked not applied, nothing written. Without it, a
   * holder taken over by a transactional grant waited out that holder's whole transaction on a
   * pool connection. `readFenced` still waits: a probe is owed the outcome of a write in flight.
   * @default 1_000
   */
  lockWaitMs?: number;
  /**
   * The data this sink guards lives in another database than the store, where the sink's schema
   * was migrated only for `sink_fences`: no store there issues fences, so the check above cannot
   * run and is skipped. Leave it off whenever the store shares the sink's database, or a sink on
   * the wrong schema goes unnoticed. Transactional effects write in the store's database, so they
   * never share a resource with such a sink.
   * @default false
   */
  separateDatabase?: boolean;
}

const MAX_REMEMBERED_WRITERS = 10_000;

const SQL = {
  // raise_sink_mark() (0013): the runtime role writes no table itself, and a fence the store of
  // this schema never issued is refused (SE131): the sink checks the store's fences only when both
  // are on one schema. Null when a newer fence is recorded. The lock wait bound ($3) holds for
  // this statement only: set before the mark's row is locked, then the transaction's own value is
  // put back for `write`.
  raise: (s: string) => `with prior as materialized (
      select pg_catalog.current_setting('lock_timeout') as before
    ), bound as materialized (
      select pg_catalog.set_config('lock_timeout', $3::text, true) as bounded from prior
    ), raised as materialized (
      select ${s}.raise_sink_mark($1, $2, false, $4) as fence from bound
    )
    select fence, pg_catalog.set_config('lock_timeout', (select before from prior), true)
      from raised`,
  raiseAtLeast: (s: string) => `select ${s}.raise_sink_mark($1, $2, true, $3) as fence`,
  highest: (s: string) => `select fence from ${s}.sink_fences where resource = $1`,
};

/** A fence the sink's schema never issued: the sink is on another schema than its store. */
const NOT_ISSUED = 'SE131';

/**
 * A FencedSink for writes into Postgres: the fence check and the caller's write commit or roll
 * back together, in ONE transaction on ONE connection, so a holder paused past its lease cannot
 * land a write after the next holder's. The raised mark row stays locked until commit, so writes
 * to one resource are serialized and commit in fence order.
 *
 * `write` gets the transaction's client: run every statement of the write on it, and do not
 * commit or roll back yourself.
 *
 * Which failures of `writeFenced` are definite, so a new user's first mistake (a missing table, a
 * constraint) releases the key instead of paging a person:
 * - **not applied** (marked with `markNotApplied`, rethrown as is, or as StoreUnavailableError
 *   for the sink's own statements): anything that fails before COMMIT is sent (BEGIN, raising the
 *   mark, an error thrown by `write`, whether or not the ROLLBACK that follows gets through: an
 *   uncommitted transaction never commits), and a COMMIT that the server answers with ROLLBACK
 *   (a statement inside `write` failed and its error was caught);
 * - **uncertain** (StoreUnavailableError, unmarked): COMMIT sent and no answer (connection lost,
 *   timeout): the transaction may have committed;
 * - **stale** (FenceStaleError): a newer holder's fence is recorded; nothing was written.
 * An apply whose earlier `writeFenced` with the same resource and fence committed (in this sink)
 * is not definite on a later failure: something of it is already written. Work done outside the
 * transaction (an HTTP call before the write) is beyond what the sink knows: catch such a failure
 * in apply and decide there.
 */
export class PgFencedSink implements FencedSink<pg.PoolClient> {
  readonly #pool: pg.Pool;
  readonly #ownsPool: boolean;
  readonly #maxResourceBytes: number;
  readonly #sql: Record<keyof typeof SQL, Statement>;
  /** `resource\0fence` of recent committed writes: a later failure of that holder is not definite. */
  readonly #committed = new Set<string>();
  /** `resource\0fence` of writes in flight, by count: one may still commit while another fails. */
  readonly #inFlight = new Map<string, number>();
  /** lockWaitMs as the value of Postgres's `lock_timeout`. */
  readonly #lockTimeout: string;
  readonly #lockWaitMs: number;

  readonly #schema: string;
  /** Whether the sink's schema has a store issuing the fences it sees (not separateDatabase). */
  readonly #issuedHere: boolean;

  constructor(options: PgFencedSinkOptions = {}) {
    this.#schema = options.schema ?? defaultSchema();
    this.#issuedHere = options.separateDatabase !== true;
    this.#sql = statements(this.#schema, SQL, {
      named: options.transactionPooling !== true,
    });
    this.#maxResourceBytes = options.limits?.maxResourceBytes ?? defaultLimits.maxResourceBytes;
    const lockWaitMs = options.lockWaitMs ?? 1_000;
    if (!Number.isSafeInteger(lockWaitMs) || lockWaitMs < 1 || lockWaitMs > 2 ** 31 - 1) {
      throw new InvalidActionError('lockWaitMs', `must be a positive integer, got ${lockWaitMs}`);
    }
    this.#lockTimeout = `${lockWaitMs}ms`;
    this.#lockWaitMs = lockWaitMs;
    const { pool, owned } = openPool(options);
    this.#pool = pool;
    this.#ownsPool = owned;
  }

  /** Ends the pool if this sink made it. */
  async close(): Promise<void> {
    if (this.#ownsPool) await this.#pool.end();
  }

  async writeFenced<T>(
    resource: string,
    fence: Fence,
    write: (tx: pg.PoolClient) => Promise<T>,
  ): Promise<T> {
    return this.#fenced('writeFenced', resource, fence, write);
  }

  async readFenced<T>(
    resource: string,
    fence: Fence,
    read: (tx: pg.PoolClient) => Promise<T>,
  ): Promise<T> {
    return this.#fenced('readFenced', resource, fence, read);
  }

  /** Validates, and counts the holder's writes in flight around the transaction. */
  async #fenced<T>(
    operation: 'writeFenced' | 'readFenced',
    resource: string,
    fence: Fence,
    work: (tx: pg.PoolClient) => Promise<T>,
  ): Promise<T> {
    refuseInsideTransactionalWork(operation);
    checkText('resource', resource, this.#maxResourceBytes);
    if (!Number.isSafeInteger(fence) || fence < 1) {
      throw new InvalidActionError('fence', `must be a fence issued by the store, got ${fence}`);
    }
    if (operation === 'readFenced') return this.#transaction(operation, resource, fence, work);
    const writer = `${resource}\0${fence}`;
    this.#inFlight.set(writer, (this.#inFlight.get(writer) ?? 0) + 1);
    try {
      return await this.#transaction(operation, resource, fence, work);
    } finally {
      const left = this.#inFlight.get(writer)! - 1;
      if (left === 0) this.#inFlight.delete(writer);
      else this.#inFlight.set(writer, left);
    }
  }

  /** One transaction on one connection: raise the mark (or refuse, for a write), run `work`, commit. */
  async #transaction<T>(
    operation: 'writeFenced' | 'readFenced',
    resource: string,
    fence: Fence,
    work: (tx: pg.PoolClient) => Promise<T>,
  ): Promise<T> {
    // Before COMMIT is sent nothing can have been written, unless an earlier write of this
    // holder committed, or another one of its writes is still in flight (a write that gave up
    // waiting for the mark while that one holds it): a failure up to there is a definite "not
    // applied".
    const writer = `${resource}\0${fence}`;
    const definite = (error: unknown): unknown =>
      operation === 'writeFenced' &&
      !this.#committed.has(writer) &&
      this.#inFlight.get(writer) === 1
        ? markNotApplied(error)
        : error;
    const beforeCommit = async <R>(query: () => Promise<R>): Promise<R> => {
      try {
        return await unavailable(operation, query);
      } catch (error) {
        throw definite(error);
      }
    };
    let session: Awaited<ReturnType<typeof checkoutFor>>;
    try {
      session = await checkoutFor(this.#pool, operation);
    } catch (error) {
      throw definite(error);
    }
    const { client } = session;
    let failed = false;
    /** A failure of ours left the connection as fit as it was. */
    let kept = false;
    try {
      // Explicit READ COMMITTED: at a serializable default, two writers raising one mark would
      // fail with a serialization error instead of waiting for the row lock.
      await beforeCommit(() => client.query('begin isolation level read committed'));
      let raised: pg.QueryResult<{ fence: string | null }>;
      try {
        raised = await beforeCommit(() =>
          operation === 'writeFenced'
            ? client.query({
                ...this.#sql.raise,
                values: [resource, fence, this.#lockTimeout, this.#issuedHere],
              })
            : client.query({
                ...this.#sql.raiseAtLeast,
                values: [resource, fence, this.#issuedHere],
              }),
        );
      } catch (error) {
        const cause = (error as { cause?: { code?: unknown; message?: string } }).cause;
        // Gave up waiting for the mark: the connection is fine once its transaction is over. The
        // resource is busy, not the store down: contended (retryable), as the store answers it.
        if (isLockNotAvailable(cause)) {
          await client.query('rollback').then(
            () => (kept = true),
            () => {},
          );
          failed = !kept;
          throw definite(new ContendedError('', resource, this.#lockWaitMs, { cause }));
        }
        if (cause?.code !== NOT_ISSUED) throw error;
        failed = true;
        throw markNotApplied(
          new StoreMisconfiguredError(
            this.#schema,
            `PgFencedSink: ${cause.message ?? 'fence not issued'}; a sink on another schema than its store's never sees the fences a transactional grant raises, so stale writes could land. Give the sink the store's schema (or, for data in another database than the store's, separateDatabase: true). Right after a failover to an asynchronous standby, this is instead a grant the new primary never received: the refusal stands, nothing is misconfigured`,
            cause,
          ),
        );
      }
      if (raised.rows[0]?.fence === null) {
        await unavailable(operation, () => client.query('rollback'));
        throw new FenceStaleError(resource, fence);
      }
      let value: T;
      try {
        value = await work(client);
      } catch (error) {
        try {
          await client.query('rollback');
        } catch {
          // The connection is gone, and with it the open transaction: nothing was committed.
          throw definite(new StoreUnavailableError(operation, error));
        }
        throw definite(error);
      }
      let committed: pg.QueryResult;
      try {
        committed = await client.query('commit');
      } catch (error) {
        // COMMIT sent and no answer: it may have committed; never called not applied.
        throw new StoreUnavailableError(operation, error);
      }
      // COMMIT of a transaction in which a statement failed answers ROLLBACK, not an error.
      if (committed.command !== 'COMMIT') {
        throw definite(
          new StoreUnavailableError(
            operation,
            new Error(
              'commit rolled back: a statement inside the callback failed and its error was caught',
            ),
          ),
        );
      }
      if (operation === 'writeFenced') this.#remember(writer);
      return value;
    } catch (error) {
      if (
        !kept &&
        (error instanceof StoreUnavailableError || error instanceof StoreMisconfiguredError)
      )
        failed = true;
      throw error;
    } finally {
      session.release(failed);
    }
  }

  #remember(writer: string): void {
    this.#committed.add(writer);
    // A holder writes within its lease; the oldest entries are long past theirs.
    if (this.#committed.size > MAX_REMEMBERED_WRITERS)
      this.#committed.delete(this.#committed.values().next().value!);
  }

  /** The highest fence this sink accepted for `resource`, 0 if none: what a probe or test reads. */
  async highestFence(resource: string): Promise<Fence> {
    checkText('resource', resource, this.#maxResourceBytes);
    const rows = await runStatement<{ fence: string }>(
      this.#pool,
      'highestFence',
      this.#sql.highest,
      [resource],
    );
    return rows[0] ? int(rows[0].fence) : 0;
  }
}

/** Runs one of our own queries: any failure of it means the sink could not be reached. */
async function unavailable<T>(operation: string, query: () => Promise<T>): Promise<T> {
  try {
    return await query();
  } catch (error) {
    throw storeError(operation, error);
  }
}
