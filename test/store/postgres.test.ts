import { describeStoreConformance } from '../conformance/store-conformance.js';
import { describeStoreProperties } from '../conformance/store-properties.js';
import { sized } from '../support/tier.js';
import { pgHarness } from './pg-support/harness.js';

// Each test gets a fresh schema, migrated from the .sql files: conformance and migrate() together.
describeStoreConformance('PgStore', () => pgHarness('pg_conformance'));
// The same random sequences as the MemoryStore's (1,000 there and in `npm run test:long`, 250 in
// `npm test`), against the same reference model.
describeStoreProperties('PgStore', () => pgHarness('pg_properties'), sized(250, 1_000));
