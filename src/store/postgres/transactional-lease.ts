import type pg from 'pg';
import { InvalidActionError } from '../../core/errors.js';

/**
 * What a transactional effect's grant holds until its COMMIT (migration 0025): its resource's
 * row (`'resource-row'`, every schema until switched) or only its resource's advisory lock, with
 * its key row written at the finish and its fence from the store's sequence (`'key-row'`).
 */
export type TransactionalLease = 'resource-row' | 'key-row';

/** Every TransactionalLease, for checking one given at run time (a CLI option, a config file). */
export const LEASES: readonly TransactionalLease[] = ['resource-row', 'key-row'];

/** migrate()'s `transactionalLease`, refused before anything is read when it is no lease. */
export function checkedLease(lease: unknown): TransactionalLease | undefined {
  if (lease === undefined || LEASES.includes(lease as TransactionalLease))
    return lease as TransactionalLease | undefined;
  throw new InvalidActionError(
    'transactionalLease',
    `must be one of ${LEASES.join(', ')}, got ${String(lease)}`,
  );
}

/**
 * Sets the schema's transactional lease, in migrate()'s transaction. Before the first key-row
 * grant can run, every transaction that wrote the resources table must have ended: a
 * transactional grant of the functions before 0025 held its resource's row but not its advisory
 * lock, and a key-row grant, which only takes that lock, would not see it. The SHARE lock waits
 * for exactly those (each holds ROW EXCLUSIVE on the table to its end), within migrate()'s lock
 * wait and retries; grants of 0025's functions take the advisory lock whatever the setting.
 * There is no way back: a resource-row grant counts on from the resource row's fence, below the
 * key-row fences granted since.
 */
export async function switchLease(
  client: pg.PoolClient,
  schemaName: string,
  lease: TransactionalLease,
  log: (line: string) => void,
): Promise<void> {
  const { rows } = await client.query<{ value: string }>(
    "select value from settings where name = 'transactional_lease' for update",
  );
  const now = rows[0]?.value;
  if (now === lease) return;
  if (now === 'key-row') {
    throw new InvalidActionError(
      'transactionalLease',
      `schema ${schemaName} takes the key-row lease already, and cannot go back: a resource-row grant would count on from a fence below the key-row ones`,
    );
  }
  await client.query('lock table resources in share mode');
  await client.query(
    `insert into settings (name, value) values ('transactional_lease', $1)
     on conflict (name) do update set value = excluded.value`,
    [lease],
  );
  log(
    `sideeffect: schema ${schemaName}: transactional effects take the ${lease} lease from now on`,
  );
}

/**
 * Whether the schema has the settings table (migration 0025) and this role may read it (a
 * worker's runtime role, which needs only the functions, may not): a column of
 * migrationStatus()'s first query, `$1` the table's qualified name.
 */
export const SETTINGS_READABLE = `coalesce(pg_catalog.has_table_privilege(pg_catalog.to_regclass($1::text), 'select'), false)`;

/** The schema's lease, for `migrate --status`, where {@link SETTINGS_READABLE}. */
export async function leaseOf(
  pool: pg.Pool,
  schema: string,
): Promise<TransactionalLease | undefined> {
  const { rows } = await pool.query<{ value: TransactionalLease }>(
    `select value from ${schema}.settings where name = 'transactional_lease'`,
  );
  return rows[0]?.value;
}
