import type pg from 'pg';
import {
  FenceStaleError,
  InvalidActionError,
  markNotApplied,
  StoreMisconfiguredError,
  StoreUnavailableError,
} from '../../core/errors.js';
import type { FencedSink } from '../../core/store.js';
import type { Fence } from '../../core/types.js';
import { checkText, defaultLimits, type Limits } from '../../core/validate.js';
import { checkoutFor, storeError } from './session.js';
import {
  defaultSchema,
  int,
  openPool,
  type PoolOptions,
  type Statement,
  statements,
} from './sql.js';

/** How a PgFencedSink connects and where its fence table is (the schema `migrate()` created). */
export interface PgFencedSinkOptions extends PoolOptions {
  /**
   * The schema holding `sink_fences` (created by `migrate()`); usually the store's schema.
   * @default `SIDEEFFECT_SCHEMA`, else 'sideeffect'
   */
  schema?: string;
  /**
   * Longest resource name accepted, as in the store.
   * @default { maxResourceBytes: 256 }
   */
  limits?: Partial<Pick<Limits, 'maxResourceBytes'>>;
}

const MAX_REMEMBERED_WRITERS = 10_000;

const SQL = {
  raise: (s: string) => `insert into ${s}.sink_fences as sink (resource, fence) values ($1, $2)
    on conflict (resource) do update set fence = excluded.fence
    where sink.fence <= excluded.fence
    returning fence`,
  raiseAtLeast: (
    s: string,
  ) => `insert into ${s}.sink_fences as sink (resource, fence) values ($1, $2)
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence)
    returning fence`,
  highest: (s: string) => `select fence from ${s}.sink_fences where resource = $1`,
};

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

  constructor(options: PgFencedSinkOptions = {}) {
    this.#sql = statements(options.schema ?? defaultSchema(), SQL, {
      named: options.transactionPooling !== true,
    });
    this.#maxResourceBytes = options.limits?.maxResourceBytes ?? defaultLimits.maxResourceBytes;
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

  /** One transaction on one connection: raise the mark (or refuse, for a write), run `work`, commit. */
  async #fenced<T>(
    operation: 'writeFenced' | 'readFenced',
    resource: string,
    fence: Fence,
    work: (tx: pg.PoolClient) => Promise<T>,
  ): Promise<T> {
    checkText('resource', resource, this.#maxResourceBytes);
    if (!Number.isSafeInteger(fence) || fence < 1) {
      throw new InvalidActionError('fence', `must be a fence issued by the store, got ${fence}`);
    }
    // Before COMMIT is sent nothing can have been written, unless an earlier write of this
    // holder committed: a failure up to there is a definite "not applied".
    const writer = `${resource}\0${fence}`;
    const definite = (error: unknown): unknown =>
      operation === 'writeFenced' && !this.#committed.has(writer) ? markNotApplied(error) : error;
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
    try {
      // Explicit READ COMMITTED: at a serializable default, two writers raising one mark would
      // fail with a serialization error instead of waiting for the row lock.
      await beforeCommit(() => client.query('begin isolation level read committed'));
      const raise = operation === 'writeFenced' ? this.#sql.raise : this.#sql.raiseAtLeast;
      const raised = await beforeCommit(() =>
        client.query({ ...raise, values: [resource, fence] }),
      );
      if (raised.rowCount === 0) {
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
      if (error instanceof StoreUnavailableError || error instanceof StoreMisconfiguredError)
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
    const { rows } = await unavailable('highestFence', () =>
      this.#pool.query<{ fence: string }>({ ...this.#sql.highest, values: [resource] }),
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
