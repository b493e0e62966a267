/**
 * A verdict from the Temporal web UI when the app encrypts its payloads. A dev server of this
 * file's own (its UI started with `--ui-codec-endpoint`) points at `sideeffect codec-server`, run
 * as a person runs it (a token file; the UI's endpoint carries the token, as docs/production.md
 * says, and the temporal CLI sends it with --codec-auth), with the AES-GCM codec of test/support/encryption-codec.ts; a worker with
 * that codec and the plugin makes a key uncertain. In headless Chromium the person opens the
 * ReconcileWorkflow: the UI decodes its input through the codec server (the card number shows,
 * while the stored history holds only `binary/encrypted`), and the `resolve` signal typed into
 * the form goes through the codec server's /encode, so the server stores it encrypted too. The
 * verdict decides the key in the store and the waiting order completes with it.
 *
 * Then what happens without a codec server (the shared dev server's UI has none): the input
 * shows as ciphertext, the UI cannot list the workflow's signals (their query answer is
 * encrypted), and the `resolve` signal goes out as `json/plain`: it decides only because the
 * codec passes payloads it did not encrypt through, and it stays unencrypted in the history.
 *
 * Needs: the `temporal` CLI (its own dev server on free ports), Postgres, /usr/bin/chromium.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { decodeJson } from '../../src/core/index.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import {
  reconcileWorkflowId,
  type SideEffectOutcome,
  statusQuery,
} from '../../src/workflows/index.js';
import { OwnTemporal } from '../faults/devserver.js';
import { freePort } from '../faults/proxy.js';
import { dataConverter, ENCRYPTED } from '../support/encryption-codec.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import {
  REPO_ROOT,
  TEMPORAL_ADDRESS,
  TEMPORAL_NAMESPACE,
  TEMPORAL_UI_URL,
  temporalCliPath,
  uniqueTaskQueue,
} from '../support/temporal.js';
import { testBundle, waitFor } from '../temporal/harness.js';
import {
  chooseSignal,
  launchChromium,
  openSignalForm,
  openWorkflow,
  pasteSignalInput,
  screenshot,
  submitSignal,
  UI_TIMEOUT_MS,
  uiSettings,
} from './temporal-ui.js';

const CONVERTER_MODULE = fileURLToPath(new URL('../support/encryption-codec.ts', import.meta.url));
const CARD = '4111111111111111';
const TOKEN = randomBytes(32).toString('hex');
const exec = promisify(execFile);

/** A payload and the events of `temporal workflow show -o json`, as far as the test reads them. */
interface ShownPayload {
  metadata: { encoding: string };
  data: string;
}
interface ShownEvent {
  workflowExecutionStartedEventAttributes?: { input: { payloads: ShownPayload[] } };
  workflowExecutionSignaledEventAttributes?: {
    signalName: string;
    input: { payloads: ShownPayload[] };
  };
}

type Event = NonNullable<Awaited<ReturnType<WorkflowHandle['fetchHistory']>>['events']>[number];

function encodingOf(event: Event): string[] {
  return (event.workflowExecutionSignaledEventAttributes?.input?.payloads ?? []).map((payload) =>
    new TextDecoder().decode(payload.metadata?.encoding ?? new Uint8Array()),
  );
}

/** `sideeffect codec-server ... -o jsonl` as a person starts it; resolves to its URL once it listens. */
async function startCodecServer(
  args: string[],
): Promise<{ child: ChildProcess; url: string; stderr: () => string }> {
  const child = spawn(
    process.execPath,
    [path.join(REPO_ROOT, 'bin/sideeffect.js'), 'codec-server', ...args],
    { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const lines = createInterface({ input: child.stdout! });
  const url = await new Promise<string>((resolve, reject) => {
    lines.once('line', (line) => {
      try {
        resolve((JSON.parse(line) as { url: string }).url);
      } catch (error) {
        reject(error);
      }
    });
    child.once('exit', (code) => reject(new Error(`codec-server exited ${code}: ${stderr}`)));
  });
  return { child, url, stderr: () => stderr };
}

interface Uncertain {
  order: WorkflowHandle;
  reconcile: WorkflowHandle<() => Promise<ReconcileResolution>>;
  key: string;
  /** A client without the codec: what the server stores. */
  raw: Client;
  store: PgStore;
}

const VERDICT = {
  applied: true,
  result: 'charged',
  reason: 'seen at the bank',
  by: 'ui-codec-test',
  // Each order's only attempt: what was seen holds for it whichever fence it has.
  attempt: 'any',
};

describe('a verdict from the Temporal UI with an encryption codec', () => {
  let dir: string;
  let temporal: OwnTemporal;
  let codec: Awaited<ReturnType<typeof startCodecServer>>;
  let uiUrl: string;
  let db: FreshSchema;
  let browser: Browser;
  const started: WorkflowHandle[] = [];
  const connections: Array<{ close(): Promise<void> }> = [];

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'sideeffect-ui-codec-'));
    const uiPort = await freePort();
    // The browser loads the UI from here: the one origin the codec server lets in.
    uiUrl = `http://localhost:${uiPort}`;
    const tokenFile = path.join(dir, 'codec.token');
    await writeFile(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    codec = await startCodecServer([
      '--data-converter',
      CONVERTER_MODULE,
      '--token-file',
      tokenFile,
      '--port',
      '0',
      '--cors-origin',
      uiUrl,
      '-o',
      'jsonl',
    ]);
    // The UI's codec setting is a URL: the token goes in its path.
    temporal = new OwnTemporal(dir, {
      ui: { port: uiPort, codecEndpoint: `${codec.url}/${TOKEN}` },
    });
    [db, , browser] = await Promise.all([
      freshSchema('ui_codec'),
      temporal.start(),
      launchChromium(),
    ]);
    db.pool.on('error', () => {});
    await migrate(db.pool, { schema: db.schema });
  });

  afterAll(async () => {
    for (const handle of started) await handle.terminate('test file finished').catch(() => {});
    await browser?.close().catch(() => {});
    for (const connection of connections) await connection.close().catch(() => {});
    await temporal?.stop();
    if (codec?.child.exitCode === null) codec.child.kill('SIGKILL');
    await db?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /**
   * A worker with the codec and the plugin on the server at `address`; an order whose charge
   * ended uncertain, waiting on its ReconcileWorkflow; `body` runs while the worker runs.
   */
  async function withUncertainOrder(
    address: string,
    body: (uncertain: Uncertain) => Promise<void>,
  ): Promise<void> {
    const [connection, native] = await Promise.all([
      Connection.connect({ address }),
      NativeConnection.connect({ address }),
    ]);
    connections.push(connection, native);
    const store = new PgStore({ pool: db.pool, schema: db.schema });
    const lost = defineEffect({
      resource: () => 'ui-codec-account',
      async apply() {
        throw new Error('connection reset after the charge');
      },
    });
    const taskQueue = uniqueTaskQueue('ui-codec');
    const worker = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue,
      workflowBundle: await testBundle(),
      dataConverter,
      plugins: [new SideEffectPlugin({ store, effects: { lost }, ttlMs: 2_000, sweepEveryMs: 0 })],
    });
    const app = new Client({ connection, namespace: TEMPORAL_NAMESPACE, dataConverter });
    const raw = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
    const workflowId = `${taskQueue}-order`;
    const key = `${workflowId}/lost`;
    await worker.runUntil(async () => {
      const order = await app.workflow.start('guarded', {
        taskQueue,
        workflowId,
        args: ['lost', { card: CARD, cents: 500 }],
      });
      started.push(order);
      const reconcile = app.workflow.getHandle<() => Promise<ReconcileResolution>>(
        reconcileWorkflowId(key),
      );
      started.push(reconcile);
      await waitFor(
        async () =>
          (await reconcile.query(statusQuery).catch(() => undefined))?.subscribers.length === 1 ||
          undefined,
        'the order to subscribe to its reconcile',
        60_000,
      );
      expect((await store.inspect(key))?.state).toBe('uncertain');
      const stored = (await raw.workflow.getHandle(reconcile.workflowId).fetchHistory()).events!;
      expect(JSON.stringify(stored)).not.toContain(CARD);
      await body({ order, reconcile, key, raw, store });
    });
  }

  /**
   * In the UI at `ui`: opens the ReconcileWorkflow, runs `look` on its page, then More Actions ->
   * Send a Signal -> `resolve`, pastes the verdict laid out as the UI formats it (a single line
   * is reformatted on the Submit click, which then does not submit: see submitSignal) and
   * submits once. Returns the signal's entry in the UI's list and the codec server calls made.
   */
  async function verdictFromUi(
    ui: string,
    workflowId: string,
    look: (page: Page) => Promise<void>,
  ): Promise<{ listed: string | undefined; calls: string[] }> {
    const calls: string[] = [];
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('request', (request) => {
      if (request.url().startsWith(codec.url))
        calls.push(
          `${request.method()} ${new URL(request.url()).pathname.replace(`/${TOKEN}/`, '/<token>/')}`,
        );
    });
    try {
      await openWorkflow(page, workflowId, ui);
      await look(page);
      const dialog = await openSignalForm(page);
      const listed = await chooseSignal(dialog, 'resolve');
      await pasteSignalInput(dialog, JSON.stringify(VERDICT, null, 2));
      await submitSignal(page, dialog);
      return { listed, calls };
    } catch (error) {
      const file = await screenshot(page, 'ui-codec-failure.png').catch(() => 'none');
      throw new Error(`driving the UI failed (screenshot: ${file}; codec calls: ${calls})`, {
        cause: error,
      });
    } finally {
      await page.close();
    }
  }

  /** The verdict decided the key: the reconcile returns it, the order gets it, the store says done. */
  async function expectDecided({ order, reconcile, key, store }: Uncertain): Promise<void> {
    const { attempt: _any, ...decided } = VERDICT;
    expect(await reconcile.result()).toMatchObject({ key, ...decided, decidedBy: 'signal' });
    expect((await order.result()) as SideEffectOutcome<unknown>).toEqual({
      outcome: 'reconciled',
      result: 'charged',
      key,
    });
    const record = await store.inspect(key);
    expect(record?.state).toBe('done');
    expect(decodeJson(record!.result!)).toBe('charged');
    expect((await store.events(key)).at(-1)).toMatchObject({
      from: 'uncertain',
      to: 'done',
      reason: 'seen at the bank',
      by: 'ui-codec-test',
    });
  }

  async function resolveSignals({ raw, reconcile }: Uncertain): Promise<Event[]> {
    const history = (await raw.workflow.getHandle(reconcile.workflowId).fetchHistory()).events!;
    return history.filter(
      (event) => event.workflowExecutionSignaledEventAttributes?.signalName === 'resolve',
    );
  }

  it('through the codec server the UI shows the decoded input and sends the verdict encrypted', async () => {
    const settings = await waitFor(
      () => uiSettings(uiUrl).catch(() => undefined),
      'the dev server UI to answer',
      UI_TIMEOUT_MS,
    );
    expect(settings.Codec.Endpoint).toBe(`${codec.url}/${TOKEN}`);
    expect(settings.DisableWriteActions || settings.WorkflowSignalDisabled).toBe(false);

    await withUncertainOrder(temporal.address, async (uncertain) => {
      const { listed, calls } = await verdictFromUi(
        uiUrl,
        uncertain.reconcile.workflowId,
        async (page) => {
          // The input (with the order's card number) is only readable decrypted.
          await page.getByText(CARD).first().waitFor({ timeout: UI_TIMEOUT_MS });
          await screenshot(page, 'ui-codec-decoded.png');
        },
      );
      expect(calls).toContain('POST /<token>/decode');
      expect(calls).toContain('POST /<token>/encode');
      // The signal list comes from a query answered through the codec too.
      expect(listed).toMatch(/^resolve\s+Decide this uncertain key/);
      await expectDecided(uncertain);
      const resolves = await resolveSignals(uncertain);
      expect(resolves.map(encodingOf)).toEqual([[ENCRYPTED]]);
      expect(JSON.stringify(resolves)).not.toContain('seen at the bank');

      // The temporal CLI reads the same history through the same codec server.
      const { stdout } = await exec(temporalCliPath(), [
        'workflow',
        'show',
        '--address',
        temporal.address,
        '--namespace',
        TEMPORAL_NAMESPACE,
        '--codec-endpoint',
        codec.url,
        '--codec-auth',
        `Bearer ${TOKEN}`,
        '-w',
        uncertain.reconcile.workflowId,
        '-o',
        'json',
      ]);
      const shown = (JSON.parse(stdout) as { events: ShownEvent[] }).events;
      const plain = (payloads: ShownPayload[] | undefined) =>
        (payloads ?? []).map(({ metadata, data }) => ({
          encoding: Buffer.from(metadata.encoding, 'base64').toString(),
          data: JSON.parse(Buffer.from(data, 'base64').toString()) as unknown,
        }));
      expect(plain(shown[0]!.workflowExecutionStartedEventAttributes?.input.payloads)).toEqual([
        {
          encoding: 'json/plain',
          data: expect.objectContaining({
            key: uncertain.key,
            input: { card: CARD, cents: 500 },
          }),
        },
      ]);
      const signaled = shown.find(
        (event) => event.workflowExecutionSignaledEventAttributes?.signalName === 'resolve',
      );
      expect(plain(signaled?.workflowExecutionSignaledEventAttributes?.input.payloads)).toEqual([
        { encoding: 'json/plain', data: VERDICT },
      ]);
    });

    // Ctrl-C / SIGTERM stops the codec server cleanly; the UI's requests were all served.
    const exited = new Promise<number | null>((resolve) => codec.child.once('exit', resolve));
    codec.child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(codec.stderr()).not.toContain('refused');
  }, 300_000);

  it('without a codec server the UI cannot read the input and sends the verdict in plain JSON', async () => {
    // The shared dev server's UI, started without --ui-codec-endpoint.
    const settings = await uiSettings();
    expect(settings.Codec.Endpoint).toBe('');
    await withUncertainOrder(TEMPORAL_ADDRESS, async (uncertain) => {
      const [started] = (
        await uncertain.raw.workflow.getHandle(uncertain.reconcile.workflowId).fetchHistory()
      ).events!;
      const [input] = started!.workflowExecutionStartedEventAttributes!.input!.payloads!;
      const ciphertext = Buffer.from(input!.data!).toString('base64');
      let cardShown = -1;
      const { listed } = await verdictFromUi(
        TEMPORAL_UI_URL,
        uncertain.reconcile.workflowId,
        async (page) => {
          // The input shows as the ciphertext's base64.
          await page.getByText(ciphertext.slice(0, 24)).first().waitFor({ timeout: UI_TIMEOUT_MS });
          await screenshot(page, 'ui-codec-none.png');
          cardShown = await page.getByText(CARD).count();
        },
      );
      expect(cardShown).toBe(0);
      // The signal list comes from a query whose answer is encrypted: the UI cannot list them,
      // and `resolve` is typed under "Custom".
      expect(listed).toBeUndefined();
      // The codec decodes only `binary/encrypted` and passes the UI's json/plain through, so
      // the verdict decides, but it sits unencrypted in the history.
      await expectDecided(uncertain);
      const resolves = await resolveSignals(uncertain);
      expect(resolves.map(encodingOf)).toEqual([['json/plain']]);
      const [payload] = resolves[0]!.workflowExecutionSignaledEventAttributes!.input!.payloads!;
      expect(JSON.parse(Buffer.from(payload!.data!).toString())).toEqual(VERDICT);
    });
  }, 300_000);
});
