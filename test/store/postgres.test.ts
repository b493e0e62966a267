import { describeStoreConformance } from '../conformance/store-conformance.js';
import { describeStoreProperties } from '../conformance/store-properties.js';
import { pgHarness } from './pg-support/harness.js';

// Each test gets a fresh schema, migrated from the .sql files: conformance and migrate() together.
describeStoreConformance('PgStore', () => pgHarness('pg_conformance'));
// The same 1,000 random sequences as the MemoryStore's, against the same reference model.
describeStoreProperties('PgStore', () => pgHarness('pg_properties'), 1000);
