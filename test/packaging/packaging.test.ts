/**
 * The packed tarball inside a user's app that is on another SDK minor than our
 * dev pins: npm must keep one copy of the SDK (peer dependencies), the app's
 * own bundler must put one copy of @temporalio/workflow in the bundle, the
 * app's own Client/NativeConnection must type-check against ours, and the
 * uncertain path must resolve end to end. Also proves CommonJS consumers can
 * require() the ESM-only package.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codeBlocks } from '../docs/blocks.js';
import { installApp, packLibrary, sdkDependencies } from '../support/packed-app.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { REPO_ROOT, TEMPORAL_ADDRESS, uniqueTaskQueue } from '../support/temporal.js';
import { waitFor } from '../temporal/harness.js';

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
  const filename = await packLibrary(path.join(REPO_ROOT, 'test-output/packaging/staging'), APP);
  await installApp(APP, `./${filename}`, { ...sdkDependencies(APP_SDK), pg: APP_PG });
  cpSync(FIXTURES, APP, { recursive: true });
}, 600_000);

let gettingStartedWorker: ChildProcess | undefined;
let gettingStartedDb: { url: string; drop: () => Promise<void> } | undefined;

afterAll(async () => {
  gettingStartedWorker?.kill('SIGKILL');
  await gettingStartedDb?.drop();
  await db?.drop();
});

/** A database of its own: the getting-started code uses the default schema, as a new user does. */
async function freshDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `gs_${Date.now().toString(36)}_${process.pid}`;
  const admin = new pg.Client({ connectionString: databaseUrl() });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(databaseUrl());
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: databaseUrl() });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
    },
  };
}

/** A sh block's commands, comments and blank lines dropped. */
function commands(block: string): string[] {
  return block
    .split('\n')
    .map((line) => line.replace(/\s+#.*$/, '').trim())
    .filter(Boolean);
}

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

  it('runs docs/getting-started.md as written: migrate, the worker, a payment, the same payment again, sideeffect list', async () => {
    gettingStartedDb = await freshDatabase();
    const dir = path.join(APP, 'getting-started');
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir);
    const files = codeBlocks('docs/getting-started.md', 'ts');
    expect(files.map((block) => block.file)).toEqual([
      'effects.ts',
      'worker.ts',
      'workflows.ts',
      'client.ts',
    ]);
    for (const block of files) writeFileSync(path.join(dir, block.file!), block.code);
    const userLines = files
      .slice(0, 3)
      .flatMap((block) => block.code.split('\n'))
      .filter((line) => line.trim());
    // The effect, the worker and the workflow: a guarded effect in about 30 lines of the user's
    // code (32 with the effects in their own file, so a test can import them).
    expect(userLines.length).toBeLessThanOrEqual(32);

    const env = {
      ...process.env,
      DATABASE_URL: gettingStartedDb.url,
      TEMPORAL_ADDRESS,
      PATH: `${path.join(APP, 'node_modules/.bin')}:${process.env.PATH}`,
    };
    // The page's commands; `npx tsx` is this repository's tsx (the scratch app installs no dev tools).
    const tsx = `${process.execPath} ${path.join(REPO_ROOT, 'node_modules/tsx/dist/cli.mjs')}`;
    const shell = (command: string) =>
      run('bash', ['-c', command.replace(/^npx tsx /, `${tsx} `)], { cwd: dir, env });
    const sh = codeBlocks('docs/getting-started.md', 'sh').map((block) => commands(block.code));
    const setup = sh.find((lines) => lines.includes('npx sideeffect migrate'))!;
    for (const command of setup.filter((line) => !line.startsWith('export DATABASE_URL='))) {
      await shell(command);
    }
    const [startWorker, ...steps] = sh.find((lines) => lines[0] === 'npx tsx worker.ts')!;
    expect(steps).toEqual(['npx tsx client.ts', 'npx tsx client.ts', 'npx sideeffect list']);

    // A run left over from an earlier test run would make `order-1` already started.
    const connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
    try {
      await new Client({ connection }).workflow
        .getHandle('order-1')
        .terminate('a new test run')
        .catch(() => {});
    } finally {
      await connection.close();
    }
    let workerOutput = '';
    gettingStartedWorker = spawn(
      'bash',
      ['-c', `exec ${startWorker!.replace(/^npx tsx /, `${tsx} `)}`],
      {
        cwd: dir,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    for (const stream of [gettingStartedWorker.stdout!, gettingStartedWorker.stderr!])
      stream.on('data', (chunk: Buffer) => {
        workerOutput += chunk.toString();
      });
    const printed: string[] = [];
    for (const step of steps) printed.push((await shell(step)).stdout);
    expect(printed[0]!.trim(), workerOutput).toBe('{ paid: 1250 }');
    expect(printed[1]!.trim()).toBe('{ paid: 1250 }');
    expect(printed[2]).toMatch(/^done\s+1\s+\S+\s+order-1\/pay\s+order:order-1/m);

    const pool = new pg.Pool({ connectionString: gettingStartedDb.url });
    try {
      const { rows } = await pool.query('select key, cents from payments');
      expect(rows).toEqual([{ key: 'order-1/pay', cents: 1250 }]);
    } finally {
      await pool.end();
    }
    gettingStartedWorker.kill('SIGTERM');
    await waitFor(
      () => (gettingStartedWorker!.exitCode === null ? undefined : true),
      'the worker to stop',
    );

    // The same files compiled by tsc run too: the worker finds workflows.js beside worker.js.
    writeFileSync(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          skipLibCheck: true,
          outDir: 'dist',
          typeRoots: [path.join(REPO_ROOT, 'node_modules/@types')],
          types: ['node'],
        },
        files: files.map((block) => block.file),
      }),
    );
    const tsc = path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc');
    const compiled = await run(process.execPath, [tsc, '-p', dir]).catch(
      (error: { stdout: string }) => error,
    );
    expect(compiled.stdout).toBe('');
    gettingStartedWorker = spawn(process.execPath, ['dist/worker.js'], {
      cwd: dir,
      env,
      stdio: 'ignore',
    });
    const again = await run(process.execPath, ['dist/client.js'], { cwd: dir, env });
    expect(again.stdout.trim()).toBe('{ paid: 1250 }');
    gettingStartedWorker.kill('SIGTERM');
  }, 300_000);

  it('serves a CommonJS consumer through require(esm)', async () => {
    const { stdout } = await run(process.execPath, ['consumer.cjs'], { cwd: APP });
    expect(JSON.parse(stdout)).toEqual({ first: 'applied', second: 'replayed', applied: 1 });
  }, 180_000);
});
