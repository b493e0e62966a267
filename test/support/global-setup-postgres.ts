/**
 * The global setup of the files that need Postgres and no Temporal (vitest globalSetup): Postgres
 * must answer at databaseUrl(); stale per-file schemas of crashed runs are dropped and the system
 * catalogs vacuumed (vacuumCatalogs: autovacuum may be off), so a run is as fast as the one
 * before it. A contributor working on the store runs these without a Temporal server (see
 * global-setup.ts for the rest).
 */
import { maskConnectionString } from '../../src/core/mask.js';
import {
  assertPostgresReachable,
  databaseUrl,
  dropStaleSchemas,
  vacuumCatalogs,
} from './postgres.js';

export function progress(line: string): void {
  process.stderr.write(`[global-setup] ${line}\n`);
}

export default async function setup(): Promise<void> {
  await assertPostgresReachable();
  const stale = await dropStaleSchemas();
  if (stale.length > 0) progress(`dropped ${stale.length} stale test schema(s)`);
  const rewritten = await vacuumCatalogs();
  if (rewritten.length > 0) progress(`rewrote bloated catalog(s): ${rewritten.join(', ')}`);
  progress(`Postgres ${maskConnectionString(databaseUrl())}`);
}
