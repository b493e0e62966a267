/**
 * A login role of one kind (docs/database-roles.md) with exactly `grantsScript()`'s grants on a
 * test schema: the store, the sink and the CLI are tested with the rights they are documented to
 * need, not as a superuser. Unique name; `drop()` removes it and its grants.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { grantsScript, type RoleKind } from '../../src/store/postgres/grants.js';
import { databaseUrl, type FreshSchema } from './postgres.js';

export interface GrantedRole {
  role: string;
  /** The test database's URL, connecting as this role. */
  url: string;
  drop(): Promise<void>;
}

export async function grantedRole(
  db: FreshSchema,
  kind: RoleKind,
  extra: string[] = [],
): Promise<GrantedRole> {
  const role = `sideeffect_${kind}_${randomBytes(4).toString('hex')}`;
  await db.pool.query(`create role ${role} login`);
  await db.pool.query(grantsScript({ schema: db.schema, role, kind }));
  for (const grant of extra) await db.pool.query(`${grant} to ${role}`);
  const base = db.config.connectionString ?? databaseUrl();
  const url = new URL(base);
  url.username = role;
  return {
    role,
    url: url.toString(),
    drop: async () => {
      const admin = new pg.Client({ connectionString: base });
      await admin.connect();
      try {
        await admin.query(`drop owned by ${role}`);
        await admin.query(`drop role ${role}`);
      } finally {
        await admin.end();
      }
    },
  };
}
