/**
 * docs/testing.md's complete test as a new user runs it: its `// file:` blocks in a fresh app
 * around the packed tarball, `@temporalio/testing` and `vitest` installed from the registry (or
 * npm's cache), and `npx vitest run checkout.test.ts` there without the repository's config (so
 * with vitest's default timeouts: 5 s a test, 10 s a hook). Run from this repository's config, the
 * page's test passed while a copy of it timed out in every user's app.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, expect, it } from 'vitest';
import { installApp, packLibrary, sdkDependencies } from '../support/packed-app.js';
import { REPO_ROOT, temporalCliPath } from '../support/temporal.js';

const run = promisify(execFile);
const versionOf = (name: string): string =>
  JSON.parse(readFileSync(path.join(REPO_ROOT, 'node_modules', name, 'package.json'), 'utf8'))
    .version;
/**
 * Outside the repository, since vitest looks for a config in every directory up from where it
 * runs: one per checkout, its installs kept between runs (only the tarball is reinstalled).
 */
const APP = path.join(
  tmpdir(),
  `sideeffect-testing-doc-${createHash('sha256').update(REPO_ROOT).digest('hex').slice(0, 12)}`,
);

beforeAll(async () => {
  const sdk = versionOf('@temporalio/worker');
  const filename = await packLibrary(path.join(REPO_ROOT, 'test-output/testing-doc-staging'), APP);
  await installApp(APP, `./${filename}`, {
    ...sdkDependencies(sdk, versionOf('@temporalio/envconfig')),
    '@temporalio/testing': sdk,
    pg: versionOf('pg'),
    vitest: versionOf('vitest'),
  });
  const page = readFileSync(path.join(REPO_ROOT, 'docs/testing.md'), 'utf8');
  const blocks = [...page.matchAll(/```ts\n\/\/ file: (\S+)\n([\s\S]*?)```/g)];
  expect(blocks.map(([, name]) => name)).toEqual([
    'effects.ts',
    'workflows.ts',
    'checkout.test.ts',
  ]);
  for (const [, name, code] of blocks) writeFileSync(path.join(APP, name!), code!);
}, 600_000);

it("passes in a fresh app with vitest's default timeouts", async () => {
  const ran = await run('npx', ['vitest', 'run', 'checkout.test.ts'], {
    cwd: APP,
    env: { ...process.env, TEMPORAL_CLI: temporalCliPath(), CI: '1' },
    maxBuffer: 16 * 1024 * 1024,
  }).catch((error: { stdout: string; stderr: string; code: number }) => error);
  expect(ran.stdout + ran.stderr).toMatch(/2 passed/);
  expect(ran.stdout + ran.stderr).not.toMatch(/timed out/i);
}, 600_000);
