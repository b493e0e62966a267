/**
 * Starts what the suites share before any test file runs (vitest globalSetup):
 *
 * - Postgres must answer at databaseUrl() (DATABASE_URL or the local default); it is not started
 *   here (that needs root; .ci/run does it). Stale per-file schemas of crashed runs are dropped.
 * - A Temporal server must answer at 127.0.0.1:7233; if none does, ./temporal-dev.sh starts the
 *   project's dev server (installing the CLI on first use).
 *
 * Decision: a dev server started here is left running after the tests. Starting it costs about a
 * second, but leaving it lets later runs, other engineers' runs in this work tree and the UI at
 * http://localhost:8233 (to look at the workflows a test left) reuse it. Stop it with
 * `./temporal-dev.sh --stop`. So there is no teardown.
 */
import { maskConnectionString } from '../../src/core/mask.js';
import { assertPostgresReachable, databaseUrl, dropStaleSchemas } from './postgres.js';
import { ensureTemporalDevServer, TEMPORAL_ADDRESS } from './temporal.js';

function progress(line: string): void {
  process.stderr.write(`[global-setup] ${line}\n`);
}

export default async function setup(): Promise<void> {
  await assertPostgresReachable();
  const stale = await dropStaleSchemas();
  if (stale.length > 0) progress(`dropped ${stale.length} stale test schema(s)`);

  const { uiUrl } = await ensureTemporalDevServer(progress);
  progress(
    `Postgres ${maskConnectionString(databaseUrl())}, Temporal ${TEMPORAL_ADDRESS} (UI ${uiUrl})`,
  );
}
