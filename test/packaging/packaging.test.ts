/**
 * The packed tarball inside a user's app that is on another SDK minor than our
 * dev pins: npm must keep one copy of the SDK (peer dependencies), the app's
 * own bundler must put one copy of @temporalio/workflow in the bundle, the
 * app's own Client/NativeConnection must type-check against ours, and the
 * uncertain path must resolve end to end. Also proves CommonJS consumers can
 * require() the ESM-only package.
 */
import { execFile } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { REPO_ROOT, TEMPORAL_ADDRESS, uniqueTaskQueue } from '../support/temporal.js';

const run = promisify(execFile);

/** Deliberately not our dev pin (1.24.0): the app brings its own SDK. */
const APP_SDK = '1.23.0';
/** The lowest pg of our peer range. */
const APP_PG = '8.11.3';
const FIXTURES = path.join(REPO_ROOT, 'test/packaging/app');
/** Git-ignored; the SDK install is kept between runs, only the tarball is reinstalled. */
const APP = path.join(REPO_ROOT, 'test-output/packaging', `sdk-${APP_SDK}`);

let db: FreshSchema;

beforeAll(async () => {
  db = await freshSchema('packaging');
  mkdirSync(APP, { recursive: true });
  // Packed from a copy, so `prepack` never cleans the work tree's dist/ under another test.
  const staging = path.join(REPO_ROOT, 'test-output/packaging/staging');
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
  const packed = await run('npm', ['pack', '--json', '--pack-destination', APP], {
    cwd: staging,
    maxBuffer: 64 * 1024 * 1024,
  });
  const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }];
  const sdk = Object.fromEntries(
    ['activity', 'client', 'common', 'envconfig', 'worker', 'workflow'].map((name) => [
      `@temporalio/${name}`,
      APP_SDK,
    ]),
  );
  writeFileSync(
    path.join(APP, 'package.json'),
    JSON.stringify({
      name: 'scratch-app',
      private: true,
      type: 'module',
      dependencies: { ...sdk, pg: APP_PG, sideeffect: `file:./${filename}` },
    }),
  );
  // A changed tarball under the same name: drop what npm remembers of the old one.
  rmSync(path.join(APP, 'package-lock.json'), { force: true });
  rmSync(path.join(APP, 'node_modules/sideeffect'), { recursive: true, force: true });
  await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], {
    cwd: APP,
    maxBuffer: 64 * 1024 * 1024,
  });
  cpSync(FIXTURES, APP, { recursive: true });
}, 600_000);

afterAll(() => db?.drop());

describe(`the packed package in an app on SDK ${APP_SDK}`, () => {
  it('installs without a second SDK: one @temporalio/workflow and one @temporalio/common', async () => {
    for (const name of ['@temporalio/workflow', '@temporalio/common', '@temporalio/worker']) {
      const { stdout } = await run('npm', ['ls', name, '--all', '--parseable'], { cwd: APP });
      expect(stdout.trim().split('\n'), name).toEqual([path.join(APP, 'node_modules', name)]);
    }
    expect(existsSync(path.join(APP, 'node_modules/sideeffect/node_modules'))).toBe(false);
    const installed = JSON.parse(
      readFileSync(path.join(APP, 'node_modules/@temporalio/worker/package.json'), 'utf8'),
    ) as { version: string };
    expect(installed.version).toBe(APP_SDK);
  }, 180_000);

  it("type-checks the app's own Client and NativeConnection against the library", async () => {
    writeFileSync(
      path.join(APP, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          typeRoots: [path.join(REPO_ROOT, 'node_modules/@types')],
          types: ['node'],
        },
        files: ['typecheck.ts'],
      }),
    );
    const tsc = path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc');
    const checked = await run(process.execPath, [tsc, '-p', APP]).catch(
      (error: { stdout: string }) => error,
    );
    expect(checked.stdout).toBe('');
  }, 180_000);

  it('runs the uncertain path with the plugin on its own Worker: uncertain -> CLI resolve -> caller completes', async () => {
    const bundleOut = path.join(APP, 'bundle.js');
    const { stdout } = await run(process.execPath, ['run.mjs'], {
      cwd: APP,
      env: {
        ...process.env,
        DATABASE_URL: databaseUrl(),
        SIDEEFFECT_SCHEMA: db.schema,
        TASK_QUEUE: uniqueTaskQueue('packaging'),
        TEMPORAL_ADDRESS,
        BUNDLE_OUT: bundleOut,
      },
      timeout: 240_000,
    });
    const summary = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(summary.stateBefore).toBe('uncertain');
    expect(summary.cli).toMatchObject({ won: true, via: 'workflow' });
    expect(summary.result).toEqual({ chargeId: 'ch_42' });
    expect(summary.stateAfter).toBe('done');

    // One copy of the workflow library in the app's bundle (two copies broke `condition()`).
    // Module paths in the bundle end in `@temporalio/workflow/lib/workflow.js`; what precedes tells the copy apart.
    const marker = '@temporalio/workflow/lib/workflow.js';
    const pieces = readFileSync(bundleOut, 'utf8').split(marker);
    const copies = new Set(
      pieces.slice(0, -1).map((before) => `${before.slice(-200).match(/[\w./@-]*$/)![0]}${marker}`),
    );
    expect([...copies]).toEqual([expect.stringMatching(/^(\.\/)?node_modules\/@temporalio/)]);
  }, 300_000);

  it('serves a CommonJS consumer through require(esm)', async () => {
    const { stdout } = await run(process.execPath, ['consumer.cjs'], { cwd: APP });
    expect(JSON.parse(stdout)).toEqual({ first: 'applied', second: 'replayed', applied: 1 });
  }, 180_000);
});
