import type pg from 'pg';
import { FenceStaleError, InvalidActionError, StoreUnavailableError } from '../../core/errors.js';
import type { FencedSink } from '../../core/store.js';
import type { Fence } from '../../core/types.js';
import { checkText, defaultLimits, type Limits } from '../../core/validate.js';
import { checkoutFor } from './session.js';
import {
  DEFAULT_SCHEMA,
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
   * @default 'sideeffect'
   */
  schema?: string;
  /**
   * Longest resource name accepted, as in the store.
   * @default { maxResourceBytes: 256 }
   */
  limits?: Partial<Pick<Limits, 'maxResourceBytes'>>;
}

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
 * commit or roll back yourself. An error thrown by `write` rolls everything back and is rethrown
 * as is; a connection lost on the way (or a commit whose fate is unknown) is thrown as
 * StoreUnavailableError, never reported as a success.
 */
export class PgFencedSink implements FencedSink<pg.PoolClient> {
  readonly #pool: pg.Pool;
  readonly #ownsPool: boolean;
  readonly #maxResourceBytes: number;
  readonly #sql: Record<keyof typeof SQL, Statement>;

  constructor(options: PgFencedSinkOptions = {}) {
    this.#sql = statements(options.schema ?? DEFAULT_SCHEMA, SQL, {
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
    const session = await checkoutFor(this.#pool, operation);
    const { client } = session;
    let failed = false;
    try {
      // Explicit READ COMMITTED: at a serializable default, two writers raising one mark would
      // fail with a serialization error instead of waiting for the row lock.
      await unavailable(operation, () => client.query('begin isolation level read committed'));
      const raise = operation === 'writeFenced' ? this.#sql.raise : this.#sql.raiseAtLeast;
      const raised = await unavailable(operation, () =>
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
          throw new StoreUnavailableError(operation, error);
        }
        throw error;
      }
      const committed = await unavailable(operation, () => client.query('commit'));
      // COMMIT of a transaction in which a statement failed answers ROLLBACK, not an error.
      if (committed.command !== 'COMMIT') {
        throw new StoreUnavailableError(
          operation,
          new Error(
            'commit rolled back: a statement inside the callback failed and its error was caught',
          ),
        );
      }
      return value;
    } catch (error) {
      if (error instanceof StoreUnavailableError) failed = true;
      throw error;
    } finally {
      session.release(failed);
    }
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
    throw new StoreUnavailableError(operation, error);
  }
}
