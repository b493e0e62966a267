import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { readTimings } from './test/support/timings.js';

/**
 * Tests that need neither Postgres, nor Temporal, nor a browser: `npm run test:unit` runs only
 * these, without the global setup, so a contributor gets an answer in seconds. A new test file
 * that needs no service belongs here (or under test/unit/).
 */
const unit = [
  'test/unit/**/*.test.ts',
  'test/syncx/**/*.test.ts',
  'test/core/**/*.test.ts',
  'test/store/memory.test.ts',
  'test/cli/args.test.ts',
  'test/cli/codec-server.test.ts',
  'test/docs/**/*.test.ts',
];

/**
 * Tests that need Postgres and no Temporal: their project's global setup does not start or ask
 * for a Temporal server, so a contributor on the store runs them (`npm run test:postgres`) with
 * Postgres alone.
 */
const postgres = [
  'test/api/**/*.test.ts',
  'test/store/**/*.test.ts',
  'test/cli/cli-read.test.ts',
  'test/cli/cli-migrate-purge.test.ts',
  'test/cli/cli-connection.test.ts',
  'test/cli/binary.test.ts',
  'test/faults/probe-race.test.ts',
  'test/faults/transactional.test.ts',
  'test/faults/hot-resource.test.ts',
  'test/faults/failover.test.ts',
  'test/faults/exclusive-writes.test.ts',
  'test/packaging/bundle-migrate.test.ts',
];

/**
 * Soak-shaped files: `npm test` runs them at a quick size; `npm run test:long` sets
 * SIDEEFFECT_TEST_TIER=long, under which this config has only the long projects and
 * test/support/tier.ts picks the soak size. So `npx vitest run <file>` never starts a soak by
 * accident. `longOnly` files run in the long tier alone: what they check, `npm test` checks in
 * a faster file (named in each file's header).
 */
const soakPostgres = [
  'test/store/postgres-concurrency.test.ts',
  'test/faults/hot-resource.test.ts',
  'test/faults/failover.test.ts',
  'test/faults/exclusive-writes.test.ts',
  // The conformance matrix: each file runs its other cell in the long tier
  // (test/store/pg-support/conformance-matrix.ts).
  'test/store/postgres.test.ts',
  'test/store/postgres-roles-conformance.test.ts',
  'test/store/postgres-serializable.test.ts',
  'test/store/postgres-pgbouncer.test.ts',
  // Transactional effects under the key-row lease.
  'test/store/postgres-transactional.test.ts',
];
const longOnly = ['test/faults/faults.test.ts'];
const soakTemporal = [
  'test/faults/mixed.test.ts',
  'test/e2e/sdk-matrix.test.ts',
  // Its comparison with a lane without a breaker runs in the long tier only.
  'test/faults/breaker.test.ts',
  ...longOnly,
];

/**
 * Files whose soak floods one in-process worker (bursts of signals for minutes) and asserts that
 * its status query answers throughout: beside two other files on a 2-core machine the worker
 * starves and queries time out, so in the long tier they run on their own (a project with
 * maxWorkers 1 runs as a group of its own). Their quick size (two bursts) runs beside the others.
 */
const alone = ['test/temporal/long-wait.test.ts'];

/**
 * Files slowest first, as a measured run left them in test/timings.json (`npm run test:timings`
 * refreshes it; test/support/timings.ts). Three files run at once, so the run ends when its last
 * file does: started first, the slow ones overlap the many short files instead of starting late
 * and running on alone. Vitest's own order (project by project, and by file size without a
 * results cache, as on a fresh CI clone) started the 86 s fault harness in the last minute. A
 * file not listed runs after the listed ones, in vitest's order; a listed file that no longer
 * exists orders nothing; nothing is skipped.
 */
const slowest = readTimings(path.dirname(fileURLToPath(import.meta.url))).files.map(
  (entry) => entry.file,
);

/** Vitest's order, with the `slowest` files moved to the front in their listed order. */
class SlowestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (spec: TestSpecification) => {
      const index = slowest.indexOf(path.relative(spec.project.config.root, spec.moduleId));
      return index < 0 ? slowest.length : index;
    };
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}

const temporalSetup = ['test/support/global-setup.ts'];
const postgresSetup = ['test/support/global-setup-postgres.ts'];
/** Per file: drops the migrated schemas the file's tests shared (test/support/migrated-schemas.ts). */
const postgresFileSetup = ['test/support/setup-postgres-file.ts'];
const longTier = process.env.SIDEEFFECT_TEST_TIER === 'long';

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 180_000,
    pool: 'forks',
    // Most service files wait on timers, leases and servers, not on the CPU: three at once keep a
    // 2-core machine busy, where vitest's default (cores - 1 = one file at a time) leaves it idle.
    // Four starved in-process workers on a shared machine (queries timed out).
    maxWorkers: 3,
    reporters: ['default'],
    sequence: { sequencer: SlowestFirst },
    projects: longTier
      ? [
          {
            extends: true,
            test: {
              name: 'long-postgres',
              include: soakPostgres,
              globalSetup: postgresSetup,
              setupFiles: postgresFileSetup,
            },
          },
          {
            extends: true,
            test: { name: 'long-temporal', include: soakTemporal, globalSetup: temporalSetup },
          },
          {
            extends: true,
            test: { name: 'long-alone', include: alone, maxWorkers: 1, globalSetup: temporalSetup },
          },
        ]
      : [
          // One worker process and no re-import per file: most of a unit file's time is importing.
          { extends: true, test: { name: 'unit', include: unit, pool: 'threads', isolate: false } },
          {
            extends: true,
            test: {
              name: 'postgres',
              include: postgres,
              exclude: unit,
              globalSetup: postgresSetup,
              setupFiles: postgresFileSetup,
            },
          },
          {
            extends: true,
            test: {
              name: 'temporal',
              include: ['test/**/*.test.ts'],
              exclude: [...unit, ...postgres, ...longOnly],
              globalSetup: temporalSetup,
            },
          },
        ],
  },
});
