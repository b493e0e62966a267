/**
 * PgStore on a database whose default isolation is SERIALIZABLE (a database or role setting some
 * deployments have): the store runs its transactions at READ COMMITTED anyway, so the whole
 * conformance suite passes unchanged. The concurrency test checks it under contention.
 */
import { describeStoreConformance } from '../conformance/store-conformance.js';
import type { BatchingMode } from '../support/batching.js';
import { databaseWithDefaultIsolation } from '../support/postgres.js';
import { pgHarness } from './pg-support/harness.js';

// There every statement is sent with its values inlined, the batch statements' arrays too.
for (const batching of ['every call', 'off'] as const satisfies BatchingMode[]) {
  describeStoreConformance(
    `PgStore on a SERIALIZABLE-default database, batching ${batching}`,
    async () =>
      pgHarness('pg_serializable', {
        url: await databaseWithDefaultIsolation('serializable'),
        batching,
      }),
  );
}
