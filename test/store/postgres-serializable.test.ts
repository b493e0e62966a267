/**
 * PgStore on a database whose default isolation is SERIALIZABLE (a database or role setting some
 * deployments have): the store runs its transactions at READ COMMITTED anyway, so the whole
 * conformance suite passes unchanged. A cell of the conformance matrix
 * (pg-support/conformance-matrix.ts). The concurrency test checks it under contention.
 */
import { describeStoreConformance } from '../conformance/store-conformance.js';
import { databaseWithDefaultIsolation } from '../support/postgres.js';
import { conformanceBatching } from './pg-support/conformance-matrix.js';
import { pgHarness } from './pg-support/harness.js';

const batching = conformanceBatching('serializable');
describeStoreConformance(
  `PgStore on a SERIALIZABLE-default database, batching ${batching}`,
  async () =>
    pgHarness('pg_serializable', {
      url: await databaseWithDefaultIsolation('serializable'),
      batching,
    }),
);
