/**
 * The packed library in a user's app on the oldest and the newest supported SDK, with what
 * production teams turn on (issue #23): an AES-GCM codec on the app's data converter, the SDK's
 * OpenTelemetryPlugin exporting to memory, and Worker Versioning with a PINNED default. The app (test/e2e/user-app/app.mjs)
 * makes two keys uncertain on version v1 and deploys v2; the test resolves one key with the
 * app's installed `sideeffect resolve --data-converter` and the other from the Temporal UI in
 * Chromium (a plain JSON signal, which the codec passes through). It checks the store's
 * verdicts, the payments' results, that the server holds every payload encrypted and no card
 * number, where each workflow ran, and the spans of the effect activity.
 *
 * Each SDK is installed from the registry into a cached app under .cache/; only the
 * tarball is reinstalled on a rerun. Needs: the dev server (its UI at TEMPORAL_UI_URL with write actions
 * enabled), Postgres, /usr/bin/chromium, the npm registry (or npm's cache) for the SDKs.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { cpSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeJson } from '../../src/core/index.js';
import { verdictJson } from '../../src/protocol/wire.js';
import { PgStore } from '../../src/store/postgres/index.js';
import { reconcileWorkflowId } from '../../src/workflows/index.js';
import { installApp, packLibrary, sdkDependencies } from '../support/packed-app.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { SDK_MATRIX } from '../support/sdk-matrix.js';
import {
  REPO_ROOT,
  TEMPORAL_ADDRESS,
  TEMPORAL_NAMESPACE,
  TEMPORAL_UI_URL,
  uniqueTaskQueue,
} from '../support/temporal.js';
import { waitFor } from '../temporal/harness.js';
import {
  chooseSignal,
  launchChromium,
  openSignalForm,
  openWorkflow,
  pasteSignalInput,
  screenshot,
  submitSignal,
  uiSettings,
} from './temporal-ui.js';

const run = promisify(execFile);

/**
 * The supported range's ends: the first and last of the SDK matrix (test/e2e/sdk-matrix.test.ts
 * runs every minor; test/unit/sdk-range.test.ts ties it to package.json's peers).
 * Below 1.15.1 this test fails: on 1.14.2 a workflow woken out of `condition()` ends "Workflow
 * cancelled" once another one finished on the worker (the SDK's bug, sdk-typescript#1866), and
 * 1.15.0 bundles workflows that never wake (docs/production.md).
 */
const SDKS = [SDK_MATRIX[0]!, SDK_MATRIX.at(-1)!];
const FIXTURES = path.join(REPO_ROOT, 'test/e2e/user-app');
/** Kept between runs, in the work tree (gitignored), so two checkouts never share it. */
const CACHE = path.join(REPO_ROOT, '.cache/user-app');
const CARDS = { cli: '4000000000000002', ui: '4000000000000010' };
const ENCRYPTED = 'binary/encrypted';
// temporal.api.enums.v1.VersioningBehavior
const PINNED = 1;
const AUTO_UPGRADE = 2;

let db: FreshSchema;
let tarball: string;
let connection: Connection;
let raw: Client;
let browser: Browser;
const started: WorkflowHandle[] = [];
const apps: ChildProcess[] = [];

beforeAll(async () => {
  const settings = await uiSettings();
  if (settings.DisableWriteActions || settings.WorkflowSignalDisabled)
    throw new Error(
      `the Temporal UI at ${TEMPORAL_UI_URL} has signals disabled (${JSON.stringify(settings)})`,
    );
  [db, tarball, connection, browser] = await Promise.all([
    freshSchema('user_app'),
    packLibrary(path.join(CACHE, 'staging'), CACHE),
    Connection.connect({ address: TEMPORAL_ADDRESS }),
    launchChromium(),
  ]);
  // No data converter: it sees the payloads as the server stores them.
  raw = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
}, 600_000);

afterAll(async () => {
  for (const app of apps) app.kill('SIGKILL');
  for (const handle of started) await handle.terminate('test file finished').catch(() => {});
  await browser?.close().catch(() => {});
  await connection?.close();
  await db?.drop();
});

type Event = NonNullable<Awaited<ReturnType<WorkflowHandle['fetchHistory']>>['events']>[number];
type StoredPayload = NonNullable<
  NonNullable<NonNullable<Event['workflowExecutionStartedEventAttributes']>['input']>['payloads']
>[number];

/** The payloads of a history that carry the app's data (inputs, signals, updates, results). */
function dataPayloads(events: Event[]): { event: string; payload: StoredPayload }[] {
  return events.flatMap((event) =>
    [
      ['started', event.workflowExecutionStartedEventAttributes?.input],
      ['signal', event.workflowExecutionSignaledEventAttributes?.input],
      [
        'update',
        event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.args,
      ],
      ['update-result', event.workflowExecutionUpdateCompletedEventAttributes?.outcome?.success],
      ['activity', event.activityTaskScheduledEventAttributes?.input],
      ['activity-result', event.activityTaskCompletedEventAttributes?.result],
      ['completed', event.workflowExecutionCompletedEventAttributes?.result],
    ].flatMap(([name, payloads]) =>
      ((payloads as { payloads?: StoredPayload[] } | null | undefined)?.payloads ?? []).map(
        (payload) => ({ event: name as string, payload }),
      ),
    ),
  );
}

function encodingOf(payload: StoredPayload): string {
  return new TextDecoder().decode(payload.metadata?.encoding ?? new Uint8Array());
}

/** Every string and byte array in the history as text: where a card number in clear would show. */
function historyText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array) return Buffer.from(value).toString('latin1');
  if (Array.isArray(value)) return value.map(historyText).join('\n');
  if (value && typeof value === 'object') return Object.values(value).map(historyText).join('\n');
  return '';
}

interface Span {
  name: string;
  traceId: string;
  attributes: Record<string, unknown>;
}

/** The app's stdout as JSON lines, its stderr for failure messages, and its exit. */
function startApp(cwd: string, env: Record<string, string>) {
  const child = spawn(process.execPath, ['app.mjs'], {
    cwd,
    env: { ...process.env, ...env },
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
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  /** The first printed line holding `field`; fails early, with the app's stderr, if it exits. */
  const line = <T>(field: string, timeoutMs: number): Promise<T> =>
    waitFor(
      () => {
        const found = stdout
          .split('\n')
          .filter((text) => text.startsWith('{'))
          .map((text) => JSON.parse(text) as Record<string, unknown>)
          .find((parsed) => field in parsed);
        if (found) return found as T;
        if (child.exitCode !== null)
          throw new Error(`the app exited ${child.exitCode} before printing ${field}:\n${stderr}`);
        return undefined;
      },
      `the app to print ${field}`,
      timeoutMs,
    ).catch((error: Error) => {
      throw new Error(`${error.message}\n${stderr}`);
    });
  return { line, exited, stderr: () => stderr };
}

describe.each(SDKS)('a user app on SDK $sdk', ({ sdk, envconfig }) => {
  it('with a codec, OpenTelemetry and Worker Versioning: one key resolved from the CLI, one from the UI', async () => {
    const app = path.join(CACHE, `sdk-${sdk}`);
    await installApp(app, `../${tarball}`, {
      ...sdkDependencies(sdk, envconfig),
      '@temporalio/interceptors-opentelemetry': sdk,
      '@opentelemetry/api': '^1.9.0',
      '@opentelemetry/context-async-hooks': '^1.25.1',
      '@opentelemetry/resources': '^1.25.1',
      '@opentelemetry/sdk-trace-base': '^1.25.1',
      pg: '8.23.1',
    });
    cpSync(FIXTURES, app, { recursive: true });
    for (const name of ['worker', 'workflow', 'interceptors-opentelemetry']) {
      const installed = JSON.parse(
        readFileSync(path.join(app, 'node_modules/@temporalio', name, 'package.json'), 'utf8'),
      ) as { version: string };
      expect(installed.version, name).toBe(sdk);
    }

    // No dots: the server splits a deployment version string at the first one.
    const taskQueue = uniqueTaskQueue(`user-app-${sdk.replaceAll('.', '_')}`);
    const env = {
      DATABASE_URL: databaseUrl(),
      SIDEEFFECT_SCHEMA: db.schema,
      TEMPORAL_ADDRESS,
      TEMPORAL_NAMESPACE,
    };
    const running = startApp(app, {
      ...env,
      TASK_QUEUE: taskQueue,
      DEPLOYMENT: `user-app-${taskQueue}`,
      CARDS: JSON.stringify(CARDS),
    });
    const payIds = { cli: `${taskQueue}-pay-cli`, ui: `${taskQueue}-pay-ui` };
    for (const id of Object.values(payIds)) started.push(raw.workflow.getHandle(id));
    const ready = await running.line<{ waiting: { cli: string; ui: string } }>('waiting', 180_000);
    const keys = ready.waiting;
    expect(keys).toEqual({ cli: `${payIds.cli}/charge`, ui: `${payIds.ui}/charge` });
    for (const key of Object.values(keys))
      started.push(raw.workflow.getHandle(reconcileWorkflowId(key)));
    const store = new PgStore({ pool: db.pool, schema: db.schema });
    expect((await store.inspect(keys.cli))?.state).toBe('uncertain');
    expect((await store.inspect(keys.ui))?.state).toBe('uncertain');

    // From a terminal, with the app's own installed bin and its data converter.
    const cli = await run(
      path.join(app, 'node_modules/.bin/sideeffect'),
      [
        'resolve',
        '--any-attempt',
        keys.cli,
        '--applied',
        '--result',
        '{"chargeId":"ch_cli"}',
        '--reason',
        'the bank statement shows the charge',
        '--by',
        'cli-operator',
        '--data-converter',
        './data-converter.mjs',
        '--json',
      ],
      { cwd: app, env: { ...process.env, ...env } },
    );
    expect(JSON.parse(cli.stdout)).toMatchObject({ won: true, via: 'workflow', applied: true });

    // From the UI: the verdict goes as a plain JSON signal, which the codec passes through. It
    // names the attempt the person checked (the key's only one), as a verdict must from 0.3 on.
    const verdict = {
      fence: (await store.inspect(keys.ui))!.fence,
      applied: true,
      result: { chargeId: 'ch_ui' },
      reason: 'seen in the bank export',
      by: 'ui-operator',
    };
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      await openWorkflow(page, reconcileWorkflowId(keys.ui));
      const dialog = await openSignalForm(page);
      await chooseSignal(dialog, 'resolve');
      await pasteSignalInput(dialog, verdictJson(verdict));
      await submitSignal(page, dialog);
    } catch (error) {
      const file = await screenshot(page, `user-app-${sdk}-failure.png`).catch(() => 'none');
      throw new Error(`driving the UI failed (screenshot: ${file})`, { cause: error });
    } finally {
      await page.close();
    }

    const summary = await running.line<{ results: unknown; spans: Span[] }>('results', 120_000);
    expect(await running.exited, running.stderr()).toBe(0);
    expect(summary.results).toEqual({ cli: { chargeId: 'ch_cli' }, ui: { chargeId: 'ch_ui' } });

    // The store holds each verdict, with who decided and why.
    for (const [key, result, by, reason] of [
      [keys.cli, { chargeId: 'ch_cli' }, 'cli-operator', 'the bank statement shows the charge'],
      [keys.ui, { chargeId: 'ch_ui' }, 'ui-operator', 'seen in the bank export'],
    ] as const) {
      const record = await store.inspect(key);
      expect(record?.state, key).toBe('done');
      expect(decodeJson(record!.result!)).toEqual(result);
      expect((await store.events(key)).at(-1)).toMatchObject({
        from: 'uncertain',
        to: 'done',
        by,
        reason,
      });
    }

    // The server holds every payload encrypted, but the UI's signal, and no card number.
    for (const via of ['cli', 'ui'] as const) {
      for (const workflowId of [payIds[via], reconcileWorkflowId(keys[via])]) {
        const events = (await raw.workflow.getHandle(workflowId).fetchHistory()).events!;
        const stored = dataPayloads(events);
        const plain = stored.filter(({ payload }) => encodingOf(payload) !== ENCRYPTED);
        expect(stored.length, workflowId).toBeGreaterThan(2);
        expect(
          plain.map(({ event, payload }) => [event, encodingOf(payload)]),
          workflowId,
        ).toEqual(workflowId === reconcileWorkflowId(keys.ui) ? [['signal', 'json/plain']] : []);
        expect(historyText(events)).not.toContain(CARDS[via]);
      }
      if (via === 'cli') {
        const events = (await raw.workflow.getHandle(reconcileWorkflowId(keys.cli)).fetchHistory())
          .events!;
        expect(dataPayloads(events).map(({ event }) => event)).toContain('update');
      }
    }

    // The payments stayed pinned on v1; the reconciles moved to v2, current since they started.
    // Read raw: describe() would decode the (encrypted) memo.
    const versioning = async (workflowId: string) =>
      (
        await raw.workflowService.describeWorkflowExecution({
          namespace: TEMPORAL_NAMESPACE,
          execution: { workflowId },
        })
      ).workflowExecutionInfo?.versioningInfo;
    for (const via of ['cli', 'ui'] as const) {
      expect(await versioning(payIds[via])).toMatchObject({
        behavior: PINNED,
        deploymentVersion: { buildId: 'v1' },
      });
      expect(await versioning(reconcileWorkflowId(keys[via]))).toMatchObject({
        behavior: AUTO_UPGRADE,
        deploymentVersion: { buildId: 'v2' },
      });
    }

    // The effect activity ran inside each payment's trace, started by the app's Client.
    for (const via of ['cli', 'ui'] as const) {
      const mine = summary.spans.filter((span) =>
        Object.values(span.attributes).includes(payIds[via]),
      );
      const activity = mine.find((span) => span.name === 'RunActivity:charge');
      expect(activity, JSON.stringify(summary.spans.map((span) => span.name))).toBeDefined();
      const start = summary.spans.find(
        (span) => span.name === 'StartWorkflow:Pay' && span.traceId === activity!.traceId,
      );
      expect(start, JSON.stringify(summary.spans)).toBeDefined();
    }
  }, 420_000);
});
