import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { GENERATED_MODULE, renderMigrationsModule } from '../../scripts/migrations-module.js';
import { listMigrations } from '../../src/store/postgres/migrate.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

describe('embedded migrations', () => {
  it('the generated module matches the .sql files (else: npm run migrations:generate)', () => {
    const committed = readFileSync(new URL(`../../${GENERATED_MODULE}`, import.meta.url), 'utf8');
    expect(
      committed === renderMigrationsModule(root),
      `${GENERATED_MODULE} is stale: run \`npm run migrations:generate\` and commit it`,
    ).toBe(true);
  });

  it('listMigrations returns every .sql file, numbered, in order, with its hash', () => {
    const migrations = listMigrations();
    expect(migrations[0]?.name).toBe('0001_init.sql');
    const versions = migrations.map((m) => m.version);
    expect(versions).toEqual([...versions].sort((a, b) => a - b));
    for (const m of migrations) {
      expect(m.name.startsWith(String(m.version).padStart(4, '0'))).toBe(true);
      expect(m.sha256).toMatch(/^[0-9a-f]{64}$/);
      const file = new URL(`../../src/store/postgres/migrations/${m.name}`, import.meta.url);
      expect(m.sql).toBe(readFileSync(file, 'utf8'));
    }
  });
});
