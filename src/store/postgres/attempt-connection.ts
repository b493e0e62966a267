import type pg from 'pg';
import { isLockNotAvailable, type Session, storeError } from './session.js';
import { POOLED_AFTER_ROLLBACK } from './transaction-guard.js';
import {
  type FinishTransaction,
  finishRefusal,
  finishTransaction,
  type OpenTransaction,
  openTransaction,
  SETTLED,
  sessionState,
} from './transaction-sql.js';

/** The operation a transactional attempt's failures are reported as. */
const OPERATION = 'executeInTransaction';

/**
 * tx_begin()'s row (0023): the session when asked, the transaction, then the grant as
 * tx_acquire() answers it.
 */
export interface Opened {
  o_session: string | null;
  o_pid: number;
  o_xid: string;
  o_temp: string | null;
  o_prepared: string | null;
  o_outcome: string;
  o_fence: string | null;
  o_retry_after_ms: string | null;
  o_result: Buffer | null;
  o_reason: string | null;
  /** The connection's session baseline (SESSION_BASELINE), when it was asked. */
  baseline?: string;
}

/**
 * What a connection's session was when the store last gave it back (its fingerprint, and the
 * count of its SQL prepared statements): the next effect's "before", so the session is read once
 * per effect, after the work. Only a connection whose session was found unchanged is remembered;
 * any other is discarded.
 */
interface SessionSeen {
  session: string;
  prepared: string;
}

const lastSeen = new WeakMap<pg.ClientBase, SessionSeen>();

/** A key's binding: its resource and payload digest. */
export interface Binding {
  resource: string;
  digest: Buffer;
}

/**
 * The connection of one transactional attempt, and whether it may go back to the pool: a query
 * that failed, a transaction left open or a session the work changed discards it instead, so
 * the pool's next user never inherits the attempt's transaction, role, search_path or timeouts.
 */
export class AttemptConnection {
  readonly #session: Session;
  readonly #pooled: boolean;
  /** The store's schema, quoted. */
  readonly #schema: string;
  /** A query that failed leaves the connection unfit for the pool, like a lost one. */
  #broken = false;
  /** Nothing of this attempt may stay: a rollback that fails means the connection died, which rolls back too. */
  #open = false;
  /** The session as it came out of the pool, to give it back so; set once the open answered. */
  #before: SessionSeen | undefined;
  /** The work sent a statement that may have prepared or dropped an SQL prepared statement. */
  #countPrepared = false;
  /** The work changed what cannot be put back (a temp table, a PREPARE): the connection is not given back. */
  #changed = false;

  constructor(session: Session, options: { pooled: boolean; schema: string }) {
    this.#session = session;
    this.#pooled = options.pooled;
    this.#schema = options.schema;
  }

  get client(): pg.PoolClient {
    return this.#session.client;
  }

  /**
   * Whether the connection was reported lost (the server ended the backend: a TTL cut of an idle
   * transaction, the store's deadline) while no query of ours ran: its transaction rolled back
   * with it, and nothing sent on it from now on can commit.
   */
  get lost(): boolean {
    return this.#session.lost !== undefined;
  }

  /** What the connection was reported lost with. */
  get lostCause(): unknown {
    return this.#session.lost;
  }

  /** Whether a query of this attempt failed (a lock wait given up, or a refusal of tx_finish(), aside). */
  get broken(): boolean {
    return this.#broken;
  }

  /**
   * Opens the attempt's transaction and takes the grant, in one round trip
   * ({@link openTransaction}). A grant that gave up waiting for the resource's row throws
   * (lockWaitExceeded), the transaction still to be rolled back.
   */
  async open(options: Omit<OpenTransaction, 'session'>): Promise<Opened> {
    // Behind a transaction-mode pooler each transaction may run on another server connection,
    // whose session no earlier finish saw.
    const seen = this.#pooled ? undefined : lastSeen.get(this.client);
    const results = await this.#query(
      openTransaction(this.#schema, { ...options, session: seen === undefined }),
    );
    this.#open = true;
    const opened = results.at(-1)!.rows[0] as Opened;
    if (options.baseline) opened.baseline = results[1]!.rows[0]!.baseline as string;
    this.#before = seen ?? { session: opened.o_session!, prepared: opened.o_prepared! };
    return opened;
  }

  /**
   * The work sent a statement that may prepare or drop an SQL prepared statement: the session
   * check counts them this once (otherwise they are not read: counting reads every prepared
   * statement of the connection).
   */
  mayPrepare(): void {
    this.#countPrepared = true;
  }

  /**
   * Writes the key, commits, and puts the session back, in one round trip
   * ({@link finishTransaction}); the key's commit time (epoch ms). A failure leaves the
   * transaction to be rolled back, unless the connection is gone or the failure came after the
   * COMMIT ({@link recorded} tells).
   */
  async finish(options: Omit<FinishTransaction, 'pooled' | 'countPrepared'>): Promise<string> {
    const results = await this.#query(
      finishTransaction(this.#schema, {
        ...options,
        pooled: this.#pooled,
        countPrepared: this.#countPrepared,
      }),
    );
    this.#open = false;
    const { at_ms } = results[SETTLED]!.rows[0] as { at_ms: string };
    this.#compare(results.at(-1)!.rows[0] as { session: string; prepared: string | null });
    return at_ms;
  }

  /**
   * The session as the finish or the rollback left it, against the one the connection came
   * with: a change discards the connection; the same is remembered as the next effect's before.
   */
  #compare(after: { session: string; prepared: string | null }): void {
    const before = this.#before!;
    if (
      after.session !== before.session ||
      (after.prepared !== null && after.prepared !== before.prepared)
    ) {
      this.#changed = true;
      lastSeen.delete(this.client);
    } else if (!this.#pooled) lastSeen.set(this.client, before);
  }

  /**
   * The commit time of the key recorded done at this fence, read after a finish that failed: a
   * statement after its COMMIT (the session's reset) failing leaves the effect committed, and the
   * connection's session unknown, so it is not given back.
   */
  async recorded(key: string, fence: number): Promise<string | undefined> {
    const { rows } = await this.client
      .query<{ at_ms: string }>(
        `select ${this.#schema}.epoch_ms(updated_at) as at_ms from ${this.#schema}.keys
          where key = $1 and fence = $2 and state = 'done'`,
        [key, fence],
      )
      .catch(() => ({ rows: [] as { at_ms: string }[] }));
    if (rows[0]) {
      this.#changed = true;
      lastSeen.delete(this.client);
    }
    return rows[0]?.at_ms;
  }

  /**
   * Rolls the attempt back; whether the ROLLBACK got through (if not, the connection is gone, and
   * the transaction with it). A rollback leaves the work's session advisory locks (and, behind a
   * pooler, its SQL prepared statements, which elsewhere discard the connection) on the session.
   * Before the open answered, nothing but the transaction's own settings changed.
   */
  async rollBack(): Promise<boolean> {
    const cleanup = this.#pooled
      ? POOLED_AFTER_ROLLBACK
      : 'select pg_catalog.pg_advisory_unlock_all()';
    try {
      if (this.#before === undefined) await this.#query('rollback');
      else {
        const results = await this.#query(
          `rollback; ${cleanup}; ${sessionState(this.#schema, this.#countPrepared)}`,
        );
        this.#compare(results.at(-1)!.rows[0] as { session: string; prepared: string | null });
      }
      this.#open = false;
      return true;
    } catch {
      return false;
    }
  }

  /**
   * The key's binding as recorded, read on this connection after the attempt rolled back: asked
   * through the pool instead, a burst of failing effects held every connection while each waited
   * for another, and the worker's every store call with them.
   */
  async binding(key: string): Promise<Binding | undefined> {
    const { rows } = await this.client
      .query<Binding>(`select resource, digest from ${this.#schema}.keys where key = $1`, [key])
      .catch((error: unknown) => {
        this.#broken = true;
        throw storeError(OPERATION, error);
      });
    return rows[0];
  }

  /**
   * After work that rolled the grant back: its fence may have been used by what the work wrote
   * after the ROLLBACK (committed on its own), so the resource moves past it unless someone holds
   * it or has moved it already. On this connection, after the attempt's rollback; best effort.
   */
  async burnFence(resource: string, fence: number): Promise<void> {
    await this.client
      .query(`select from ${this.#schema}.tx_burn_fence($1, $2)`, [resource, fence])
      .catch(() => {
        this.#broken = true;
      });
  }

  /** Gives the connection back, or discards it if it is unfit or the attempt's deadline fired. */
  release(deadlineFired: boolean): void {
    this.#session.release(this.#broken || this.#open || this.#changed || deadlineFired);
  }

  /** One simple query: its statements' results, in order. */
  async #query(text: string): Promise<pg.QueryResult[]> {
    try {
      const results = (await this.client.query(text)) as unknown as
        | pg.QueryResult
        | pg.QueryResult[];
      return Array.isArray(results) ? results : [results];
    } catch (error) {
      if (!isLockNotAvailable(error) && !finishRefusal(error)) this.#broken = true;
      throw storeError(OPERATION, error);
    }
  }
}
