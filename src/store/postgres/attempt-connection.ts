import type pg from 'pg';
import type { TransactionIsolation } from '../../core/store.js';
import { isLockNotAvailable, type Session, storeError } from './session.js';
import type { Statement } from './sql.js';
import { POOLED_AFTER_ROLLBACK, SESSION_STATE } from './transaction-guard.js';

/** The operation a transactional attempt's failures are reported as. */
const OPERATION = 'executeInTransaction';

/** What the opening of a transactional attempt's transaction reads of its session. */
export interface Opened {
  lock_timeout: string;
  session: string;
  pid: number;
  baseline?: string;
  temp_at_begin?: string;
  prepared_at_begin?: string;
}

/**
 * The connection of one transactional attempt, and whether it may go back to the pool: a query
 * that failed, a transaction left open or a session the work changed discards it instead, so
 * the pool's next user never inherits the attempt's transaction, role, search_path or timeouts.
 */
export class AttemptConnection {
  readonly #session: Session;
  readonly #pooled: boolean;
  /** A query that failed leaves the connection unfit for the pool, like a lost one. */
  #broken = false;
  /** Nothing of this attempt may stay: a rollback that fails means the connection died, which rolls back too. */
  #open = false;
  /** The session as it came out of the pool (SESSION_STATE), to give it back so. */
  #sessionBefore: string | undefined;
  /** The work changed what cannot be put back (a temp table, a PREPARE): the connection is not given back. */
  #changed = false;

  constructor(session: Session, pooled: boolean) {
    this.#session = session;
    this.#pooled = pooled;
  }

  get client(): pg.PoolClient {
    return this.#session.client;
  }

  /** Whether a query of this attempt failed (a lock wait given up aside). */
  get broken(): boolean {
    return this.#broken;
  }

  async query<R extends pg.QueryResultRow>(
    statement: string | Statement,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    try {
      return await this.client.query<R>(
        typeof statement === 'string' ? statement : { ...statement, values },
      );
    } catch (error) {
      if (!isLockNotAvailable(error)) this.#broken = true;
      throw storeError(OPERATION, error);
    }
  }

  /** Opens the attempt's transaction ({@link beginTransaction}) and reads its session. */
  async begin(
    isolation: TransactionIsolation,
    ttlMs: number,
    lockTimeout: string,
    columns: string,
  ): Promise<Opened> {
    const begun = (await this.query(
      beginTransaction(isolation, ttlMs, lockTimeout, columns),
    )) as unknown as [pg.QueryResult, pg.QueryResult<Opened>];
    this.#open = true;
    const opened = begun[1].rows[0]!;
    this.#sessionBefore = opened.session;
    return opened;
  }

  commit(): Promise<pg.QueryResult> {
    return this.#end('commit');
  }

  async rollBack(): Promise<void> {
    await this.#end('rollback').catch(() => {});
    this.#open = false;
  }

  /** Gives the connection back, or discards it if it is unfit or the attempt's deadline fired. */
  release(deadlineFired: boolean): void {
    this.#session.release(this.#broken || this.#open || this.#changed || deadlineFired);
  }

  async #end(command: 'commit' | 'rollback'): Promise<pg.QueryResult> {
    // A rollback leaves the work's session advisory locks (and, behind a pooler, its SQL
    // prepared statements, which elsewhere discard the connection) on the session.
    const cleanup =
      command === 'commit'
        ? ''
        : this.#pooled
          ? `${POOLED_AFTER_ROLLBACK};`
          : 'select pg_catalog.pg_advisory_unlock_all();';
    const results = (await this.query(
      `${command}; ${cleanup} select ${SESSION_STATE} as session`,
    )) as unknown as pg.QueryResult[];
    this.#open = false;
    if (results.at(-1)!.rows[0]!.session !== this.#sessionBefore) this.#changed = true;
    return results[0]!;
  }
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
