/**
 * A scratch user app around the packed tarball: what `npm publish` would ship, installed by npm
 * from the registry beside the app's own SDK version. The SDK install is kept between runs (only
 * the tarball is reinstalled), and the work tree is packed once for its content, so a rerun costs
 * one small install.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
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

/** What `npm pack` reads of the work tree: copied to the staging copy, and hashed to name a pack. */
const PACKED = ['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md', 'bin', 'src', 'docs'];
const PACK_CONFIG = ['tsconfig.json', 'tsconfig.build.json', 'package-lock.json'];
/** Left in the staging copy's dist/ before packing; a pack that ships it did not clean. */
export const STALE_BUILD_FILE = 'dist/stale.js.map';
/** Packs by content, `<sha256>/`, kept in the work tree (gitignored) between runs. */
const PACKS = path.join(REPO_ROOT, '.cache/packed');
/** A lock older than this is a killed run's: a pack (clean, tsc build, tar) takes a few minutes at most. */
const STALE_LOCK_MS = 10 * 60_000;

/**
 * The work tree's tarball (`npm pack`, so `prepack` builds dist/) copied into `destination`;
 * returns its file name. Packed once for the content of what it ships (and the build's config):
 * the files that install it start together, and each pack is a full `tsc` build, so the first
 * packs under a lock and the others wait for it and copy its tarball; a rerun on the same source
 * packs nothing. Packed from a copy under `staging`, so `prepack` never cleans the work tree's
 * dist/ under another test; the copy's dist/ holds a stale file ({@link STALE_BUILD_FILE}).
 */
export async function packLibrary(staging: string, destination: string): Promise<string> {
  const digest = contentDigest();
  const pack = path.join(PACKS, digest);
  const lock = `${pack}.lock`;
  const deadline = Date.now() + 2 * STALE_LOCK_MS;
  mkdirSync(PACKS, { recursive: true });
  while (!existsSync(path.join(pack, 'filename'))) {
    if (Date.now() > deadline) throw new Error(`no pack appeared in ${pack}`);
    if (!tryLock(lock)) {
      await sleep(500);
      continue;
    }
    try {
      rmSync(pack, { recursive: true, force: true });
      const filename = await npmPack(staging, pack);
      writeFileSync(path.join(pack, 'filename'), filename);
      dropOtherPacks(digest);
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
  const filename = readFileSync(path.join(pack, 'filename'), 'utf8');
  mkdirSync(destination, { recursive: true });
  copyFileSync(path.join(pack, filename), path.join(destination, filename));
  return filename;
}

/** Takes the lock (an atomic mkdir), breaking one a killed run left; false while another holds it. */
function tryLock(lock: string): boolean {
  try {
    mkdirSync(lock);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    const age = Date.now() - (statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now());
    if (age > STALE_LOCK_MS) rmSync(lock, { recursive: true, force: true });
    return false;
  }
}

/** sha256 over every packed file's path and content, in a stable order. */
function contentDigest(): string {
  const hash = createHash('sha256');
  const add = (relative: string) => {
    const file = path.join(REPO_ROOT, relative);
    if (statSync(file).isDirectory()) {
      for (const entry of readdirSync(file).sort()) add(path.join(relative, entry));
      return;
    }
    hash.update(`${relative}\0`);
    hash.update(readFileSync(file));
    hash.update('\0');
  };
  for (const entry of [...PACKED, ...PACK_CONFIG]) add(entry);
  return hash.digest('hex').slice(0, 16);
}

/** Packs of an older content (and their stale locks): only the newest is reused. */
function dropOtherPacks(digest: string): void {
  for (const entry of readdirSync(PACKS))
    if (!entry.startsWith(digest))
      rmSync(path.join(PACKS, entry), { recursive: true, force: true });
}

async function npmPack(staging: string, destination: string): Promise<string> {
  rmSync(staging, { recursive: true, force: true });
  for (const entry of PACKED)
    cpSync(path.join(REPO_ROOT, entry), path.join(staging, entry), { recursive: true });
  for (const entry of ['tsconfig.json', 'tsconfig.build.json'])
    cpSync(path.join(REPO_ROOT, entry), path.join(staging, entry));
  symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(staging, 'node_modules'));
  // A stale build output, as an old dist/ holds: prepack's clean must drop it (tarball.test.ts).
  mkdirSync(path.join(staging, 'dist'));
  writeFileSync(path.join(staging, STALE_BUILD_FILE), '{"sources":["../src/gone.ts"]}');
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
