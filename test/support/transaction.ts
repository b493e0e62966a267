import type pg from 'pg';

/**
 * Runs `work` in a transaction on one client of `pool`: committed when it returns, rolled back
 * when it throws, the client given back either way. For tests that call the schema's functions
 * the way a worker of an earlier version did, inside its own transaction.
 */
export async function inTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const result = await work(client);
    await client.query('commit');
    return result;
  } catch (error) {
    await client.query('rollback');
    throw error;
  } finally {
    client.release();
  }
}
