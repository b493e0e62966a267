/**
 * Runs before each test file of the projects that use Postgres (vitest setupFiles): at the
 * file's end, the migrated schemas its tests shared (test/support/migrated-schemas.ts) are
 * dropped.
 */
import { afterAll } from 'vitest';
import { dropMigratedSchemas } from './migrated-schemas.js';

afterAll(dropMigratedSchemas);
