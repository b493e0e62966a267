/**
 * A scratch user app around the packed tarball: what `npm publish` would ship, installed by npm
 * from the registry beside the app's own SDK version. The SDK install is kept between runs (only
 * the tarball is reinstalled), so a rerun costs a pack and one small install.
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from './temporal.js';

const run = promisify(execFile);

/** The SDK packages the library lists as peers, at one version (`envconfig` may lag behind). */
export function sdkDependencies(version: string, envconfig = version): Record<string, string> {
  return {
    ...Object.fromEntries(
      ['activity', 'client', 'common', 'worker', 'workflow'].map((name) => [
        `@temporalio/${name}`,
        version,
      ]),
    ),
    '@temporalio/envconfig': envconfig,
  };
}

/**
 * `npm pack` of the work tree into `destination`; returns the tarball's file name. Packed from
 * a copy under `staging`, so `prepack` never cleans the work tree's dist/ under another test.
 */
export async function packLibrary(staging: string, destination: string): Promise<string> {
  rmSync(staging, { recursive: true, force: true });
  for (const entry of [
    'package.json',
    'README.md',
    'LICENSE',
    'CHANGELOG.md',
    'bin',
    'src',
    'docs',
  ])
    cpSync(path.join(REPO_ROOT, entry), path.join(staging, entry), { recursive: true });
  for (const entry of ['tsconfig.json', 'tsconfig.build.json'])
    cpSync(path.join(REPO_ROOT, entry), path.join(staging, entry));
  symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(staging, 'node_modules'));
  mkdirSync(destination, { recursive: true });
  const packed = await run('npm', ['pack', '--json', '--pack-destination', destination], {
    cwd: staging,
    maxBuffer: 64 * 1024 * 1024,
  });
  const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }];
  return filename;
}

/**
 * Writes the app's package.json (`tarball` is a path relative to `app`) and runs
 * `npm install --prefer-offline` there; `legacyPeerDeps` installs an SDK outside the peer range,
 * as a user overriding npm's refusal (or a package manager that only warns) would.
 */
export async function installApp(
  app: string,
  tarball: string,
  dependencies: Record<string, string>,
  { legacyPeerDeps = false }: { legacyPeerDeps?: boolean } = {},
): Promise<void> {
  mkdirSync(app, { recursive: true });
  writeFileSync(
    path.join(app, 'package.json'),
    JSON.stringify({
      name: 'scratch-app',
      private: true,
      type: 'module',
      dependencies: { ...dependencies, sideeffect: `file:${tarball}` },
    }),
  );
  // A changed tarball under the same name: drop what npm remembers of the old one.
  rmSync(path.join(app, 'package-lock.json'), { force: true });
  rmSync(path.join(app, 'node_modules/sideeffect'), { recursive: true, force: true });
  const flags = legacyPeerDeps ? ['--legacy-peer-deps'] : [];
  await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', ...flags], {
    cwd: app,
    maxBuffer: 64 * 1024 * 1024,
  });
}
