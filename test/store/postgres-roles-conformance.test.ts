/**
 * The store conformance suite, whole, as a runtime role with exactly grantsScript()'s grants
 * (docs/database-roles.md): every function the store calls in this batching mode must be one the
 * role may run. A cell of the conformance matrix (pg-support/conformance-matrix.ts); the roles
 * themselves are tested in postgres-roles.test.ts.
 */
import { describeStoreConformance } from '../conformance/store-conformance.js';
import { conformanceBatching } from './pg-support/conformance-matrix.js';
import { pgHarness } from './pg-support/harness.js';

const batching = conformanceBatching('runtime role');
describeStoreConformance(
  `PgStore as a runtime role with exactly its grants, batching ${batching}`,
  () => pgHarness('pg_runtime_role', { role: 'runtime', batching }),
);
