import { describeStoreConformance } from '../conformance/store-conformance.js';
import { pgHarness } from './pg-support/harness.js';

// Each test gets a fresh schema, migrated from the .sql files: conformance and migrate() together.
describeStoreConformance('PgStore', () => pgHarness('pg_conformance'));
