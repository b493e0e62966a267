import { describeBreakerConformance } from '../conformance/breaker-conformance.js';
import { describeStoreConformance } from '../conformance/store-conformance.js';
import { describeStoreProperties } from '../conformance/store-properties.js';
import type { BatchingMode } from '../support/batching.js';
import { sized } from '../support/tier.js';
import { pgHarness } from './pg-support/harness.js';

// Each test gets a fresh schema, migrated from the .sql files: conformance and migrate() together.
// Both ways a call can reach the database: every call through the shared (batch) statement, and
// one statement per call (which is also what a call alone takes with batching on).
for (const batching of ['every call', 'off'] as const satisfies BatchingMode[]) {
  describeStoreConformance(`PgStore, batching ${batching}`, () =>
    pgHarness('pg_conformance', { batching }),
  );
}
// The same random sequences as the MemoryStore's (1,000 there and in `npm run test:long`, 250 in
// `npm test`), against the same reference model, in every batching mode.
for (const batching of ['on', 'every call', 'off'] as const satisfies BatchingMode[]) {
  describeStoreProperties(
    `PgStore, batching ${batching}`,
    () => pgHarness('pg_properties', { batching }),
    sized(250, 1_000),
  );
}
// Breakers through their functions only (0021), batching does not touch them.
describeBreakerConformance('PgStore', () => pgHarness('pg_breakers'));
