/**
 * src/store/postgres/schema.sql is the schema every migration leaves, so a migration's review
 * reads its real effect there: this file migrates a fresh schema, dumps it as
 * `npm run schema:dump` does, and fails with the difference while the committed file is stale.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dumpSchema, SCHEMA_DUMP_COMMAND, SCHEMA_FILE } from '../../scripts/schema-snapshot.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';

let db: FreshSchema;
beforeAll(async () => {
  db = await freshSchema('schema_snapshot');
});
afterAll(() => db?.drop());

describe('the schema snapshot', () => {
  it(`${SCHEMA_FILE} is what the migrations leave (else: ${SCHEMA_DUMP_COMMAND})`, async () => {
    const committed = readFileSync(new URL(`../../${SCHEMA_FILE}`, import.meta.url), 'utf8');
    expect(
      await dumpSchema(db),
      `${SCHEMA_FILE} differs from a freshly migrated schema (- committed, + migrated): run \`${SCHEMA_DUMP_COMMAND}\`, review the diff and commit it`,
    ).toBe(committed);
  });
});
