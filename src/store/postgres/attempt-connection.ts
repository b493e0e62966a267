import type pg from 'pg';
import { isLockNotAvailable, type Session, storeError } from './session.js';
import { POOLED_AFTER_ROLLBACK } from './transaction-guard.js';
import {
  type FinishTransaction,
  finishRefusal,
  finishTransaction,
  type OpenTransaction,
  openTransaction,
  sessionState,
} from './transaction-sql.js';

/** The operation a transactional attempt's failures are reported as. */
const OPERATION = 'executeInTransaction';

/** tx_open()'s row (0016): the session and transaction, then the grant as tx_acquire() answers it. */
export interface Opened {
  o_session: string;
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
  /** The session as it came out of the pool (tx_session_state), to give it back so. */
  #sessionBefore: string | undefined;
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

  /** Whether a query of this attempt failed (a lock wait given up, or a refusal of tx_finish(), aside). */
  get broken(): boolean {
    return this.#broken;
  }

  /**
   * Opens the attempt's transaction and takes the grant, in one round trip
   * ({@link openTransaction}). A grant that gave up waiting for the resource's row throws
   * (lockWaitExceeded), the transaction still to be rolled back.
   */
  async open(options: Omit<OpenTransaction, 'pooled'>): Promise<Opened> {
    const results = await this.#query(
      openTransaction(this.#schema, { ...options, pooled: this.#pooled }),
    );
    this.#open = true;
    const opened = results.at(-1)!.rows[0] as Opened;
    if (options.baseline) opened.baseline = results[1]!.rows[0]!.baseline as string;
    this.#sessionBefore = opened.o_session;
    return opened;
  }

  /**
   * Puts the session back, writes the key and commits, in one round trip
   * ({@link finishTransaction}); the key's commit time (epoch ms). A failure leaves the
   * transaction to be rolled back, unless the connection is gone.
   */
  async finish(options: Omit<FinishTransaction, 'pooled'>): Promise<string> {
    const results = await this.#query(
      finishTransaction(this.#schema, { ...options, pooled: this.#pooled }),
    );
    this.#open = false;
    const { o_session, o_at_ms } = results.at(-2)!.rows[0] as {
      o_session: string;
      o_at_ms: string;
    };
    if (o_session !== this.#sessionBefore) this.#changed = true;
    return o_at_ms;
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
      if (this.#sessionBefore === undefined) await this.#query('rollback');
      else {
        const results = await this.#query(`rollback; ${cleanup}; ${sessionState(this.#schema)}`);
        if (results.at(-1)!.rows[0]!.session !== this.#sessionBefore) this.#changed = true;
      }
      this.#open = false;
      return true;
    } catch {
      return false;
    }
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
