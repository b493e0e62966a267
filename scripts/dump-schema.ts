/**
 * `npm run schema:dump`: rewrites src/store/postgres/schema.sql from a freshly migrated schema in
 * the test database (DATABASE_URL, else the local one the tests use), then drops that schema.
 */
import { writeFileSync } from 'node:fs';
import { freshSchema } from '../test/support/postgres.js';
import { dumpSchema, SCHEMA_FILE } from './schema-snapshot.js';

const db = await freshSchema('schema_dump');
try {
  writeFileSync(new URL(`../${SCHEMA_FILE}`, import.meta.url), await dumpSchema(db));
  console.log(`wrote ${SCHEMA_FILE}`);
} finally {
  await db.drop();
}
