import { InvalidActionError } from '../../core/errors.js';
import type { Limits } from '../../core/validate.js';
import type { PoolOptions } from './sql.js';

/** How a PgStore connects, where its tables are, and which input it refuses. */
export interface PgStoreOptions extends PoolOptions {
  /**
   * The schema `migrate()` was run on.
   * @default `SIDEEFFECT_SCHEMA`, else 'sideeffect'
   */
  schema?: string;
  /**
   * Size limits checked before any statement is sent; unset fields keep their default.
   * @default defaultLimits (key 512 B, resource 256 B, payload and result 1 MiB, reason 4 KiB)
   */
  limits?: Partial<Limits>;
  /**
   * Keys deleted per transaction by `purge`.
   * @default 5_000
   */
  purgeBatchSize?: number;
  /**
   * The share of its wall time a `purge` spends deleting: after each full batch it rests in
   * proportion to how long that batch took (0.25: three times as long), so purging millions of
   * keys leaves the database to the callers most of the time instead of halving their
   * throughput. 1 purges flat out.
   * @default 0.25
   */
  purgeDutyCycle?: number;
  /**
   * The longest an acquire (plain or transactional) waits for a resource row that another
   * transaction holds locked before it answers `contended` with this as its retry delay. A
   * transactional holder keeps its resource's row locked until it commits; without this bound
   * every caller of that resource would wait out a stalled holder, each on a pool connection.
   * The same bound holds `renew`, `complete`, `markUncertain` and `release` of a holder whose
   * resource a transactional grant took over: they throw ContendedError (retryable, nothing
   * written) instead of waiting out that holder's whole transaction.
   * @default 1_000
   */
  lockWaitMs?: number;
  /**
   * How many of this store's acquire calls (plain or transactional) may be in flight at a time
   * for a busy resource: one whose row a call found held by another transaction (a
   * transactional holder holds it for its whole work) within the last `lockWaitMs`. Each caller
   * that waits for that row holds a pool connection for up to `lockWaitMs`; without this bound a
   * few dozen callers of one busy resource held every connection of the pool, and every other
   * resource's calls queued behind them. The others answer `contended` at once, without a pool
   * connection, with a retry delay past the earliest one's wait. On a resource nobody found held,
   * every call goes in (replays, grants, a live lease's `contended` wait for no row), and looks
   * first without waiting; only a call that finds the row held waits, if it gets a place. Places
   * over all resources are at most half the pool's connections (at least one), so calls of free
   * resources always find connections free.
   * @default 1
   */
  waitersPerResource?: number;
  /**
   * Concurrent calls of one kind (acquire, renew, complete, markUncertain, release, inspect)
   * that arrive while a statement of their kind is in flight are sent together, as ONE statement
   * carrying all their keys, when it returns: one round trip and one commit for all of them,
   * where one statement per key left a busy worker at about half the throughput of a
   * hand-written idempotency table. There is no timer: a call that finds none of its kind in
   * flight is sent at the end of its event-loop turn, alone by its one-key statement unless that
   * turn made others; a call made while none of the store's calls is in flight (a lone caller)
   * is sent as soon as the code that made it has run, without waiting for the turn's I/O. Each key is answered exactly as alone (docs/performance.md). `maxKeys`
   * (1 to 64) bounds the keys of one statement. `false` sends one statement per call.
   * @default true (maxKeys 32)
   */
  batching?: boolean | { maxKeys?: number };
}

/**
 * The numeric options with their defaults, each refused at construction when out of range, so a
 * typo fails where the store is made rather than as odd waits or purges under load.
 */
export function checkPgStoreOptions(options: PgStoreOptions) {
  const batch = options.purgeBatchSize ?? 5_000;
  if (!Number.isSafeInteger(batch) || batch < 1 || batch > 2 ** 31 - 1) {
    throw new InvalidActionError('purgeBatchSize', `must be a positive integer, got ${batch}`);
  }
  const duty = options.purgeDutyCycle ?? 0.25;
  if (typeof duty !== 'number' || !(duty > 0 && duty <= 1)) {
    throw new InvalidActionError('purgeDutyCycle', `must be in (0, 1], got ${String(duty)}`);
  }
  const lockWaitMs = options.lockWaitMs ?? 1_000;
  if (!Number.isSafeInteger(lockWaitMs) || lockWaitMs < 1 || lockWaitMs > 2 ** 31 - 1) {
    throw new InvalidActionError('lockWaitMs', `must be a positive integer, got ${lockWaitMs}`);
  }
  const waiters = options.waitersPerResource ?? 1;
  if (!Number.isSafeInteger(waiters) || waiters < 1) {
    throw new InvalidActionError(
      'waitersPerResource',
      `must be a positive integer, got ${String(waiters)}`,
    );
  }
  return { batch, duty, lockWaitMs, waiters };
}
