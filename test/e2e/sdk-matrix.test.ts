/**
 * The library on every SDK release its peer range admits (test/support/sdk-matrix.ts): a user's
 * app, installed from npm beside the packed tarball, runs the uncertain path twice on one worker
 * with the SDK's default reuseV8Context, and the second caller must wake as the first did (on a
 * bundler without the SDK's fix for webpack >= 5.108 it stayed asleep for ever). `npm test` runs
 * the matrix's oldest and newest release, `npm run test:long` all of them. A release whose
 * bundler lacks the fix is refused at Worker.create, with the fix named.
 *
 * Each app is installed under .cache/sdk-matrix/ (gitignored) and kept: a rerun reinstalls only
 * the tarball. Needs the dev server, Postgres and the npm registry (or npm's cache).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { cpSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installApp, packLibrary, sdkDependencies } from '../support/packed-app.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { SDK_MATRIX, UNFIXED } from '../support/sdk-matrix.js';
import {
  REPO_ROOT,
  TEMPORAL_ADDRESS,
  TEMPORAL_NAMESPACE,
  uniqueTaskQueue,
} from '../support/temporal.js';
import { LONG_TIER } from '../support/tier.js';

const CACHE = path.join(REPO_ROOT, '.cache/sdk-matrix');
const FIXTURES = path.join(REPO_ROOT, 'test/e2e/sdk-app');
const RUNS = LONG_TIER ? SDK_MATRIX : [SDK_MATRIX[0]!, SDK_MATRIX.at(-1)!];

let db: FreshSchema;
let tarball: string;
const apps: ChildProcess[] = [];

beforeAll(async () => {
  [db, tarball] = await Promise.all([
    freshSchema('sdk_matrix'),
    packLibrary(path.join(CACHE, 'staging'), CACHE),
  ]);
}, 300_000);

afterAll(async () => {
  for (const app of apps) app.kill('SIGKILL');
  await db?.drop();
});

/** Installs the app on `sdk` (timed) and checks npm installed that release. */
async function install(
  sdk: string,
  envconfig: string,
  options: { legacyPeerDeps?: boolean } = {},
): Promise<{ app: string; ms: number }> {
  const app = path.join(CACHE, `sdk-${sdk}`);
  const started = Date.now();
  await installApp(
    app,
    `../${tarball}`,
    { ...sdkDependencies(sdk, envconfig), pg: '8.23.1' },
    options,
  );
  cpSync(FIXTURES, app, { recursive: true });
  for (const name of ['worker', 'workflow', 'client']) {
    const manifest = path.join(app, 'node_modules/@temporalio', name, 'package.json');
    expect((JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version).toBe(sdk);
  }
  return { app, ms: Date.now() - started };
}

/** Runs the app to its end; its one JSON line (the last one printed), exit code and stderr. */
function runApp(app: string, sdk: string) {
  const child = spawn(process.execPath, ['app.mjs'], {
    cwd: app,
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl(),
      SIDEEFFECT_SCHEMA: db.schema,
      TASK_QUEUE: uniqueTaskQueue(`sdk-${sdk.replaceAll('.', '_')}`),
      TEMPORAL_ADDRESS,
      TEMPORAL_NAMESPACE,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  apps.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise<{ line: Record<string, unknown>; code: number | null; stderr: string }>(
    (resolve) =>
      child.on('exit', (code) => {
        const lines = stdout.split('\n').filter((text) => text.startsWith('{'));
        const last = lines.at(-1);
        resolve({ line: last ? JSON.parse(last) : {}, code, stderr });
      }),
  );
}

describe.each(RUNS)('SDK $sdk', ({ sdk, envconfig }) => {
  it('two uncertain calls one after the other on one worker: both callers wake', async () => {
    const { app, ms: installMs } = await install(sdk, envconfig);
    const started = Date.now();
    const { line, code, stderr } = await runApp(app, sdk);
    console.info(`SDK ${sdk}: install ${installMs} ms, app ${Date.now() - started} ms`);
    expect(line, stderr).toEqual({
      results: [{ chargeId: 'ch_1' }, { chargeId: 'ch_2' }],
      ms: expect.any(Number),
    });
    expect(code, stderr).toBe(0);
  }, 300_000);
});

describe(`SDK ${UNFIXED.sdk}, whose bundler lacks the webpack fix`, () => {
  it('is refused at Worker.create, naming the release with the fix', async () => {
    // Outside the peer range, so npm refuses it unless told to install anyway.
    const { app } = await install(UNFIXED.sdk, UNFIXED.envconfig, { legacyPeerDeps: true });
    const { line, code, stderr } = await runApp(app, UNFIXED.sdk);
    expect(line, stderr).toMatchObject({
      refused: { name: 'UnsupportedSdkError', code: 'UNSUPPORTED_SDK' },
    });
    const { message } = (line as { refused: { message: string } }).refused;
    expect(message).toContain(`@temporalio/worker ${UNFIXED.sdk}`);
    expect(message).toContain(`to ${UNFIXED.fixedIn} or newer`);
    expect(message).toContain('reuseV8Context: false');
    expect(code).toBe(1);
  }, 300_000);
});
