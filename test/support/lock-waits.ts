import type pg from 'pg';

/**
 * Resolves once some statement waits for a lock that backend `holder` has. Scoped to that holder:
 * other test files share the database, and a wait of theirs must not let a race test go on before
 * its own statement is queued (which made the race not happen, or a rejection come early).
 */
export async function someoneWaitsFor(pool: pg.Pool, holder: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await pool.query<{ n: number }>(
      'select count(*)::int as n from pg_stat_activity where $1 = any(pg_blocking_pids(pid))',
      [holder],
    );
    if (rows[0]!.n > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`no statement ever waited for a lock of backend ${holder}`);
}

/** The backend a client (a transactional work's `tx`, a lock holder) runs on. */
export async function backendOf(client: pg.ClientBase): Promise<number> {
  return (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
}

/** One backend of an application waiting for a lock, and what it runs. */
export interface LockWaiter {
  pid: number;
  query: string;
  lock: string;
}

/**
 * The lock waits of the backends named `application`, each waiting for more than `longerThanMs`.
 * Timed from the wait's own start (pg_locks.waitstart), not the statement's: on a loaded machine
 * a statement can take 50 ms before a 5 ms first look even begins to wait, and would count as a
 * long wait. A backend appears once per lock it waits for.
 */
export async function lockWaiters(
  pool: pg.Pool,
  application: string,
  longerThanMs: number,
): Promise<LockWaiter[]> {
  const { rows } = await pool.query<LockWaiter>(
    `select a.pid, left(a.query, 120) as query, l.locktype || ' ' || l.mode as lock
       from pg_catalog.pg_locks l join pg_catalog.pg_stat_activity a on a.pid = l.pid
      where a.application_name = $1 and not l.granted
        and statement_timestamp() - l.waitstart > $2 * interval '1 millisecond'`,
    [application, longerThanMs],
  );
  return rows;
}
