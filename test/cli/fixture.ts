/**
 * What the CLI files share: a fresh migrated schema per file, an operator role with exactly its
 * documented grants on it (docs/database-roles.md), a PgStore and Runner on it, the `sideeffect`
 * command against it (in-process, or the real binary when a test asks: test/support/cli.ts), and
 * keys left uncertain as an operator finds them. The CLI is tested in several files, by concern.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect } from 'vitest';
import { Runner } from '../../src/core/index.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { type CliRun, type CliRunOptions, runCli } from '../support/cli.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { type GrantedRole, grantedRole } from '../support/roles.js';

export interface CliFixture {
  readonly db: FreshSchema;
  readonly store: PgStore;
  readonly runner: Runner;
  /** The CLI against this file's schema, as the operator role unless `env` says otherwise. */
  cli(args: string[], env?: Record<string, string>, options?: CliRunOptions): Promise<CliRun>;
  /** A new key whose apply failed after the call went out: uncertain, as the operator finds it. */
  uncertainKey(): Promise<{ key: string; resource: string }>;
}

/** `migrate` and `purge` are the owner's and the runtime role's, not the operator's. */
export const asOwner = { DATABASE_URL: databaseUrl() };

/** Sets up the file's schema, role and store before its tests and drops them after. */
export function cliFixture(prefix: string): CliFixture {
  let db: FreshSchema | undefined;
  let operator: GrantedRole | undefined;
  let store: PgStore | undefined;
  let runner: Runner | undefined;
  // Keys name ReconcileWorkflows, whose ids are global on the shared dev server: unique per file
  // and per run, so two CLI files (or two checkouts) never reach each other's workflows.
  const run = randomBytes(3).toString('hex');
  let n = 0;
  beforeAll(async () => {
    db = await freshSchema(prefix);
    await migrate(db.pool, { schema: db.schema });
    operator = await grantedRole(db, 'operator');
    store = new PgStore({ pool: db.pool, schema: db.schema });
    runner = new Runner(store, { ttlMs: 30_000 });
  });
  afterAll(async () => {
    await db?.drop();
    await operator?.drop();
  });
  return {
    get db() {
      return db!;
    },
    get store() {
      return store!;
    },
    get runner() {
      return runner!;
    },
    cli: (args, env = {}, options = {}) =>
      runCli(args, { DATABASE_URL: operator!.url, SIDEEFFECT_SCHEMA: db!.schema, ...env }, options),
    uncertainKey: async () => {
      n += 1;
      const action = { key: `order-${run}-${n}/charge`, resource: `card-${run}-${n}` };
      const execution = await runner!.execute(action, async () => {
        throw new Error('gateway timeout after the charge was sent');
      });
      expect(execution.outcome).toBe('uncertain');
      return action;
    },
  };
}
