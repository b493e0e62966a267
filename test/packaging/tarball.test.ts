import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../support/temporal.js';

/**
 * What `npm pack` ships, built by the package's own `prepack` in a copy of the repository (so the
 * work tree's dist/ is never cleaned under a running test). A stale file left in dist/ must not
 * survive prepack's clean.
 */
const staging = mkdtempSync(path.join(tmpdir(), 'sideeffect-pack-'));
afterAll(() => rmSync(staging, { recursive: true, force: true }));

function packedFiles(): string[] {
  for (const entry of [
    'package.json',
    'README.md',
    'LICENSE',
    'CHANGELOG.md',
    'tsconfig.json',
    'tsconfig.build.json',
    'bin',
    'src',
    'docs',
  ]) {
    cpSync(path.join(REPO_ROOT, entry), path.join(staging, entry), { recursive: true });
  }
  symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(staging, 'node_modules'));
  mkdirSync(path.join(staging, 'dist'));
  writeFileSync(path.join(staging, 'dist/stale.js.map'), '{"sources":["../src/gone.ts"]}');
  const json = execFileSync('npm', ['pack', '--dry-run', '--json', '--no-audit', '--no-fund'], {
    cwd: staging,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const [report] = JSON.parse(json) as Array<{ files: Array<{ path: string }> }>;
  return report!.files.map((file) => file.path);
}

describe('npm pack', () => {
  it('ships LICENSE, README, CHANGELOG, docs and dist with declarations, and no dangling source map', () => {
    const files = packedFiles();
    for (const required of [
      'LICENSE',
      'README.md',
      'CHANGELOG.md',
      'package.json',
      'bin/sideeffect.js',
      'dist/index.js',
      'dist/index.d.ts',
      'dist/store/postgres/index.d.ts',
      'dist/cli/main.js',
      'docs/versioning.md',
    ]) {
      expect(files, required).toContain(required);
    }
    const shipsSources = files.some((file) => file.startsWith('src/'));
    const maps = files.filter((file) => file.endsWith('.map'));
    expect(shipsSources ? [] : maps, 'source maps whose sources are not shipped').toEqual([]);
    expect(files.filter((file) => file.startsWith('test/') || file.endsWith('.test.ts'))).toEqual(
      [],
    );
  }, 180_000);
});
