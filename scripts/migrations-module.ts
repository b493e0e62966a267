/**
 * Renders src/store/postgres/migrations/*.sql into one TypeScript module, so the SQL travels
 * inside the compiled code: a bundled worker (esbuild, webpack) has no `.sql` files beside it.
 * The `.sql` files stay the source of truth; `npm run migrations:generate` writes the module and a
 * unit test fails while the committed module differs from what this renders.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const MIGRATIONS_DIR = 'src/store/postgres/migrations';
export const GENERATED_MODULE = 'src/store/postgres/migrations.generated.ts';

/** `NNNN_words.sql`: the number orders the files and is what a schema records as applied. */
const MIGRATION_FILE = /^(\d{4})_[a-z0-9_]+\.sql$/;

export function renderMigrationsModule(root: string): string {
  const names = readdirSync(join(root, MIGRATIONS_DIR)).sort();
  const misnamed = names.filter((name) => !MIGRATION_FILE.test(name));
  if (misnamed.length > 0) {
    throw new Error(
      `${MIGRATIONS_DIR} holds files not named NNNN_words.sql: ${misnamed.join(', ')}`,
    );
  }
  const versions = names.map((name) => Number(MIGRATION_FILE.exec(name)![1]));
  const duplicate = versions.find((version, i) => versions.indexOf(version) !== i);
  if (duplicate !== undefined) {
    throw new Error(`${MIGRATIONS_DIR} has two migrations numbered ${duplicate}`);
  }
  const entries = names.map((name, i) => {
    const sql = readFileSync(join(root, MIGRATIONS_DIR, name), 'utf8');
    return `  {\n    version: ${versions[i]},\n    name: ${JSON.stringify(name)},\n    sql: ${JSON.stringify(sql)},\n  },\n`;
  });
  return (
    `// Generated from ${MIGRATIONS_DIR}/*.sql by \`npm run migrations:generate\`: do not edit.\n` +
    `// The .sql files are the source of truth; a unit test fails while this module is stale.\n\n` +
    `/** Every migration file in version order, as written. */\n` +
    `export const embeddedMigrations: ReadonlyArray<{\n` +
    `  readonly version: number;\n  readonly name: string;\n  readonly sql: string;\n}> = [\n` +
    entries.join('') +
    `];\n`
  );
}
