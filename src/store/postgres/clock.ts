import type pg from 'pg';
import { int } from './sql.js';

/**
 * The database's clock now, in epoch milliseconds: the clock the store stamps every transition
 * with (`store_now()`), read without touching a schema. An age computed against it ("uncertain for
 * longer than 10 minutes") is right even when the machine asking runs minutes off; against
 * `Date.now()` a skewed operator laptop would pick the wrong keys. Only pg_catalog is named, so
 * nothing on the caller's search_path runs.
 */
export async function databaseNow(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ now: string }>(
    `select pg_catalog.floor(extract(epoch from pg_catalog.clock_timestamp()) operator(pg_catalog.*) 1000::numeric)::bigint as now`,
  );
  return int(rows[0]!.now);
}
