import { createHash } from 'node:crypto';
import type pg from 'pg';
import { InvalidActionError } from '../../core/errors.js';
import type { KeyRecord, SweepReport } from '../../core/types.js';
import { checkTtl } from '../../core/validate.js';
import { type KeyRow, keyColumns, toRecord } from './key-statements.js';
import {
  checkoutFor,
  type Session,
  type StatementRunner,
  statementRunner,
  storeError,
} from './session.js';
import { statements } from './sql.js';

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

/** The sweep's statements: the sweep itself, and the claims of keys to reconcile. */
const SWEEP_SQL = {
  sweep: (s: string) => `select * from ${s}.sweep()`,
  // Claims lock the keys they pick (others skip them); the conflict clause re-checks the latest
  // committed start, so a claimer whose snapshot missed another's start cannot claim it twice
  // (claim_reconciles(), 0013).
  claimReconciles: (s: string) => `select ${keyColumns(s)} from ${s}.keys
    join ${s}.claim_reconciles($1, $2) as claimed (key) using (key) order by updated_at`,
};

/**
 * PgStore's sweep: leadership among many workers' sweepers by an advisory lock per schema, the
 * sweep of expired leases, and the claims of uncertain keys to reconcile.
 */
export class SweepLeader {
  readonly #pool: pg.Pool;
  readonly #rows: StatementRunner<keyof typeof SWEEP_SQL>;
  /** Sweep leaders in this process, each on the session that holds the advisory lock. */
  readonly #leaders = new Map<object, Session>();
  /** Stops watching a leader's session for its end (before it goes back to the pool). */
  readonly #unwatch = new Map<object, () => void>();
  readonly #transactionPooling: boolean;
  readonly #sweepLockKey: string;

  constructor(pool: pg.Pool, schema: string, transactionPooling: boolean) {
    this.#pool = pool;
    this.#transactionPooling = transactionPooling;
    this.#sweepLockKey = sweepLockKey(schema);
    this.#rows = statementRunner(
      pool,
      statements(schema, SWEEP_SQL, { named: !transactionPooling }),
    );
  }

  /** Gives up every leadership held in this process (the store is closing). */
  async resignAll(): Promise<void> {
    await Promise.all([...this.#leaders.keys()].map((owner) => this.resignSweep(owner)));
  }

  async sweep(): Promise<SweepReport> {
    const [row] = await this.#rows<{ o_uncertain: string[]; o_freed: string[] }>('sweep', []);
    return { uncertain: row!.o_uncertain, freed: row!.o_freed };
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
}
