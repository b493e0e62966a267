/**
 * The PgStore conformance matrix: the whole conformance suite (test/conformance) on each way a
 * deployment reaches the database, in each way the store sends its calls. Each cell runs once per
 * CI run (`.ci/run` runs `npm test` and `npm run test:long`): `npm test` runs one cell per path,
 * each batching mode on two paths, so every path and every statement set is checked in minutes;
 * `npm run test:long` runs the other four.
 *
 * | path (file)                                   | batching `every call` | batching `off` |
 * | --------------------------------------------- | --------------------- | -------------- |
 * | superuser, direct (postgres.test.ts)          | test:long             | npm test       |
 * | runtime role's grants (postgres-roles-conformance.test.ts) | npm test | test:long      |
 * | SERIALIZABLE default (postgres-serializable.test.ts) | test:long      | npm test       |
 * | PgBouncer, transaction pooling (postgres-pgbouncer.test.ts) | npm test | test:long     |
 *
 * `every call` sends each call through the batch statements (the path concurrent calls take);
 * `off` sends one statement per call (what a call alone takes with batching on, so `on` adds no
 * cell to a sequential suite). The four files are in vitest.config.ts's `soakPostgres`, so the
 * long tier runs their other cell.
 */
import type { BatchingMode } from '../../support/batching.js';
import { LONG_TIER } from '../../support/tier.js';

export type ConformancePath = 'superuser' | 'runtime role' | 'serializable' | 'pgbouncer';

const CELLS: Record<ConformancePath, { quick: BatchingMode; long: BatchingMode }> = {
  superuser: { quick: 'off', long: 'every call' },
  'runtime role': { quick: 'every call', long: 'off' },
  serializable: { quick: 'off', long: 'every call' },
  pgbouncer: { quick: 'every call', long: 'off' },
};

/** The batching mode this tier runs the conformance suite in on `path`. */
export function conformanceBatching(path: ConformancePath): BatchingMode {
  const cell = CELLS[path];
  return LONG_TIER ? cell.long : cell.quick;
}
