import { describeBreakerConformance } from '../conformance/breaker-conformance.js';
import { describeStoreConformance } from '../conformance/store-conformance.js';
import { describeStoreProperties } from '../conformance/store-properties.js';
import type { BatchingMode } from '../support/batching.js';
import { LONG_TIER, sized } from '../support/tier.js';
import { conformanceBatching } from './pg-support/conformance-matrix.js';
import { pgHarness } from './pg-support/harness.js';

// The superuser's cell of the conformance matrix (pg-support/conformance-matrix.ts), on a schema
// migrated once for the file and emptied between tests; migrate() is tested in
// postgres-migrate*.test.ts.
const batching = conformanceBatching('superuser');
describeStoreConformance(`PgStore, batching ${batching}`, () =>
  pgHarness('pg_conformance', { batching }),
);
// The same random sequences as the MemoryStore's (1,000 there and in `npm run test:long`, 250 in
// `npm test`), against the same reference model, in both ways a call reaches the database: the
// sequences await each call, so batching `on` sends what `off` sends and is no mode of its own.
for (const mode of ['every call', 'off'] as const satisfies BatchingMode[]) {
  describeStoreProperties(
    `PgStore, batching ${mode}`,
    () => pgHarness('pg_properties', { batching: mode }),
    sized(250, 1_000),
  );
}
// Breakers through their functions only (0021), batching does not touch them: `npm test` only.
if (!LONG_TIER) describeBreakerConformance('PgStore', () => pgHarness('pg_breakers'));
