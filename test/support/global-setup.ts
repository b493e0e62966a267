/**
 * Starts what the Temporal suites share before any of their files runs (vitest globalSetup; the
 * Postgres-only files use global-setup-postgres.ts alone):
 *
 * - Postgres must answer at databaseUrl() (DATABASE_URL or the local default); it is not started
 *   here (that needs root; .ci/run does it). Stale per-file schemas of crashed runs are dropped.
 * - A Temporal server must answer at TEMPORAL_ADDRESS (127.0.0.1:7233 unless
 *   SIDEEFFECT_TEST_TEMPORAL_ADDRESS says otherwise); if none does at the default, ./temporal-dev.sh
 *   starts the project's dev server (installing the CLI on first use).
 *
 * Decision: a dev server started here is left running after the tests. Starting it costs about a
 * second, but leaving it lets later runs, other engineers' runs in this work tree and the UI at
 * TEMPORAL_UI_URL (to look at the workflows a test left) reuse it. Stop it with
 * `./temporal-dev.sh --stop`. So there is no teardown.
 */
import setupPostgres, { progress } from './global-setup-postgres.js';
import { ensureTemporalDevServer, TEMPORAL_ADDRESS } from './temporal.js';

export default async function setup(): Promise<void> {
  await setupPostgres();
  const { uiUrl } = await ensureTemporalDevServer(progress);
  progress(`Temporal ${TEMPORAL_ADDRESS} (UI ${uiUrl})`);
}
