import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { packLibrary, STALE_BUILD_FILE } from '../support/packed-app.js';

/**
 * What `npm pack` ships, built by the package's own `prepack` in a copy of the repository (so the
 * work tree's dist/ is never cleaned under a running test): the tarball the packaged-app tests
 * install (test/support/packed-app.ts, packed once for them all). A stale file left in dist/ must
 * not survive prepack's clean.
 */
const scratch = mkdtempSync(path.join(tmpdir(), 'sideeffect-pack-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

async function packedFiles(): Promise<string[]> {
  const tarball = await packLibrary(path.join(scratch, 'staging'), scratch);
  const listing = execFileSync('tar', ['-tzf', path.join(scratch, tarball)], { encoding: 'utf8' });
  return listing
    .split('\n')
    .filter((entry) => entry !== '' && !entry.endsWith('/'))
    .map((entry) => entry.replace(/^package\//, ''));
}

describe('npm pack', () => {
  it('ships LICENSE, README, CHANGELOG, docs and dist with declarations, and no dangling source map', async () => {
    const files = await packedFiles();
    expect(files).not.toContain(STALE_BUILD_FILE);
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
  }, 300_000);
});
