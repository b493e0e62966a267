/**
 * End to end through the real Temporal web UI: a guarded transfer writes downstream and then
 * fails, so its key becomes uncertain and the calling workflow waits on `reconcile/<key>`. An
 * operator opens that ReconcileWorkflow in the UI (headless Chromium), pastes the verdict exactly
 * as the demo prints it into the "Send a Signal" form through the clipboard, clicks Submit once,
 * and the decision flows back: the ReconcileWorkflow completes with it, the caller returns the recorded result without applying again, and the Postgres store
 * records the key as done with that result. Before that, the operator mistakenly sends the
 * internal `subscribe` and `reconciled` signals from the UI's lists with a `null` input: both are
 * refused, and both workflows keep running and still resolve.
 *
 * Needs: the dev server (its UI at TEMPORAL_UI_URL with write actions enabled), Postgres, /usr/bin/chromium.
 */
import { fileURLToPath } from 'node:url';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveInstructions } from '../../examples/instructions.js';
import { defineEffect } from '../../src/activities/index.js';
import { decodeJson } from '../../src/core/index.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { migrate, PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import {
  type ReconcileStatus,
  reconcileWorkflowId,
  type SideEffectOutcome,
  statusQuery,
} from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import {
  TEMPORAL_ADDRESS,
  TEMPORAL_NAMESPACE,
  TEMPORAL_UI_URL,
  uniqueTaskQueue,
} from '../support/temporal.js';
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

Runtime.install({ logger: new DefaultLogger('WARN') });

const WORKFLOWS_PATH = fileURLToPath(new URL('./workflows.ts', import.meta.url));

interface Transfer {
  account: string;
  amount: number;
}
interface Receipt {
  receipt: string;
  amount: number;
}
interface LedgerRow {
  id: number;
  key: string;
  account: string;
  amount: number;
  fence: string;
}

/** Polls until `probe` returns a value; fails with `what` after `timeoutMs`. */
async function waitFor<T>(
  probe: () => Promise<T | undefined>,
  what: () => string,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what()}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe('resolving an uncertain side effect from the Temporal web UI', () => {
  let db: FreshSchema;
  let store: PgStore;
  let sink: PgFencedSink;
  let connection: Connection;
  let native: NativeConnection;
  let client: Client;
  let worker: Worker;
  const taskQueue = uniqueTaskQueue('ui-resolve');
  let running: Promise<void>;
  let browser: Browser;
  const started: WorkflowHandle[] = [];
  /** apply() calls per key: the downstream write must happen once. */
  const applies = new Map<string, number>();

  const ledger = async (key: string): Promise<LedgerRow[]> =>
    (await db.pool.query<LedgerRow>('select * from transfers where key = $1 order by id', [key]))
      .rows;

  beforeAll(async () => {
    const settings = await uiSettings();
    if (settings.DisableWriteActions || settings.WorkflowSignalDisabled) {
      throw new Error(
        `the Temporal UI at ${TEMPORAL_UI_URL} has signals disabled (${JSON.stringify(settings)}); ` +
          'start the dev server with ./temporal-dev.sh, which leaves write actions on',
      );
    }

    db = await freshSchema('ui_resolve');
    db.pool.on('error', () => {});
    await migrate(db.pool, { schema: db.schema });
    // The downstream: a ledger table in the same database, written behind the fence.
    await db.pool.query(`create table transfers (
      id serial primary key, key text not null, account text not null,
      amount integer not null, fence bigint not null)`);
    store = new PgStore({ pool: db.pool, schema: db.schema });
    sink = new PgFencedSink({ pool: db.pool, schema: db.schema });

    const effects = {
      transfer: defineEffect({
        resource: (input: Transfer) => `account:${input.account}`,
        apply: async (input: Transfer, { key, lease }): Promise<Receipt> => {
          const attempt = (applies.get(key) ?? 0) + 1;
          applies.set(key, attempt);
          const id = await sink.writeFenced(lease.resource, lease.fence, async (tx) => {
            const { rows } = await tx.query<{ id: number }>(
              `insert into ${db.schema}.transfers (key, account, amount, fence)
               values ($1, $2, $3, $4) returning id`,
              [key, input.account, input.amount, lease.fence],
            );
            return rows[0]!.id;
          });
          // The write committed, but the caller never hears so: the outcome is uncertain.
          if (attempt === 1) throw new Error('connection reset after the write');
          return { receipt: `tx-${id}`, amount: input.amount };
        },
      }),
    };

    connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
    native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
    client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
    worker = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue,
      workflowsPath: WORKFLOWS_PATH,
      plugins: [new SideEffectPlugin({ store, effects, ttlMs: 5_000, sweepEveryMs: 0, client })],
    });
    running = worker.run();
    browser = await launchChromium();
  });

  afterAll(async () => {
    // Nothing a failed run left waiting may outlive the file on the shared dev server.
    for (const handle of started) await handle.terminate('test file finished').catch(() => {});
    await browser?.close().catch(() => {});
    worker?.shutdown();
    await running?.catch(() => {});
    await native?.close().catch(() => {});
    await connection?.close().catch(() => {});
    await db?.drop();
  });

  it('a resolve signal sent through the UI form decides the key: recorded result, one downstream write, key done', async () => {
    const caller = await client.workflow.start('transferTwice', {
      taskQueue,
      workflowId: `ui-resolve-${taskQueue}`,
      args: [
        { account: 'acme-42', amount: 4200 } satisfies Transfer,
        { heartbeatTimeout: '10 seconds', startToCloseTimeout: '1 minute' },
      ],
    });
    started.push(caller);
    const key = `${caller.workflowId}/pay`;
    const reconcile = client.workflow.getHandle<() => Promise<ReconcileResolution>>(
      reconcileWorkflowId(key),
    );
    started.push(reconcile);

    // The caller is stuck on an uncertain key, waiting for a person.
    let last: unknown;
    const waiting = await waitFor<ReconcileStatus>(
      async () => {
        try {
          const status = await reconcile.query(statusQuery);
          last = status.state;
          return status.state === 'waiting' ? status : undefined;
        } catch (error) {
          last = error;
          return undefined;
        }
      },
      () => `reconcile/${key} to wait for a person (last: ${String(last)})`,
    );
    expect(waiting).toMatchObject({
      key,
      resource: 'account:acme-42',
      effect: 'transfer',
      rejected: [],
      subscribers: [caller.workflowId],
    });
    expect(waiting.reason).toContain('connection reset after the write');
    expect((await store.inspect(key))?.state).toBe('uncertain');
    const [written] = await ledger(key);
    expect(await ledger(key)).toHaveLength(1);

    // The operator checks the ledger and reports what the transfer did.
    const result: Receipt = { receipt: `tx-${written!.id}`, amount: 4200 };
    // The attempt checked, as `sideeffect show` and the workflow's details print it.
    const fence = (await store.inspect(key))!.fence;
    expect(waiting.fence).toBe(fence);
    const resolution = {
      applied: true,
      result,
      reason: 'seen in the ledger',
      by: 'ui-test',
      fence,
    };
    // Exactly what the demo prints for a person to paste.
    const { text, pasteable } = resolveInstructions({
      uiUrl: TEMPORAL_UI_URL,
      namespace: TEMPORAL_NAMESPACE,
      key,
      resource: 'account:acme-42',
      verdict: resolution,
      downstream: `the ledger: transfer ${written!.id}`,
    });
    expect(text.split('\n')).toEqual(expect.arrayContaining(pasteable.split('\n')));
    expect(pasteable.split('\n').length).toBeGreaterThan(5);

    // A person picks the internal signals from the UI's lists by mistake, with input neither
    // handler can use: both are refused and neither workflow fails a task.
    const misfired = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      for (const [workflowId, name] of [
        [reconcile.workflowId, 'subscribe'],
        [caller.workflowId, 'reconciled'],
      ] as const) {
        await openWorkflow(misfired, workflowId);
        const dialog = await openSignalForm(misfired);
        expect(await chooseSignal(dialog, name)).toMatch(
          new RegExp(`^${name}\\s+Internal, not for people`),
        );
        await pasteSignalInput(dialog, 'null');
        await submitSignal(misfired, dialog);
      }
    } catch (error) {
      const file = await screenshot(misfired, 'ui-misfire-failure.png').catch(() => 'none');
      throw new Error(`driving the UI failed (screenshot: ${file})`, { cause: error });
    } finally {
      await misfired.close();
    }
    const refused = await waitFor(
      async () => {
        const status = await reconcile.query(statusQuery);
        return status.rejected.length > 0 ? status : undefined;
      },
      () => 'the malformed subscribe to be refused',
    );
    expect(refused.rejected).toMatchObject([{ signal: 'subscribe', input: null }]);
    expect(refused.state).toBe('waiting');
    const taskFailures = async (handle: WorkflowHandle) =>
      ((await handle.fetchHistory()).events ?? []).filter(
        (event) => event.workflowTaskFailedEventAttributes,
      ).length;
    expect(await taskFailures(caller)).toBe(0);
    expect(await taskFailures(reconcile)).toBe(0);

    // The operator pastes the `applied` template the workflow's details show, unchanged (0.1's
    // template had `"result": null`, 0.2's no result and no attempt): its placeholders are text,
    // refused, listed with why and shown on the page, and neither workflow is wedged.
    const { currentDetails } = await reconcile.query<{ currentDetails?: string }>(
      '__temporal_workflow_metadata',
    );
    expect(currentDetails).not.toContain('"result": null');
    // The template as the UI shows it, pasted unchanged.
    const template = /```json\n([\s\S]*?)\n```/.exec(currentDetails ?? '')?.[1];
    expect(JSON.parse(template ?? 'null')).toEqual({
      applied: true,
      result: '<what the effect returned, as JSON>',
      reason: 'found in the downstream',
      by: 'your name',
      fence: `<the attempt you checked: ${waiting.fence} is the latest>`,
    });
    const bare = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      await openWorkflow(bare, reconcile.workflowId);
      const dialog = await openSignalForm(bare);
      await chooseSignal(dialog, 'resolve');
      await pasteSignalInput(dialog, template!);
      await submitSignal(bare, dialog);
    } catch (error) {
      const file = await screenshot(bare, 'ui-bare-applied-failure.png').catch(() => 'none');
      throw new Error(`driving the UI failed (screenshot: ${file})`, { cause: error });
    } finally {
      await bare.close();
    }
    const bareRefused = await waitFor(
      async () => {
        const status = await reconcile.query(statusQuery);
        return status.rejected.some((r) => r.error.includes("the template's placeholder"))
          ? status
          : undefined;
      },
      () => 'the template sent unchanged to be refused',
    );
    const { currentDetails: refusedDetails } = await reconcile.query<{ currentDetails?: string }>(
      '__temporal_workflow_metadata',
    );
    expect(refusedDetails).toContain('**Last verdict refused**');
    expect(refusedDetails).toContain("fence is still the template's placeholder");
    expect(bareRefused.state).toBe('waiting');
    expect((await store.inspect(key))?.state).toBe('uncertain');
    expect(await taskFailures(caller)).toBe(0);
    expect(await taskFailures(reconcile)).toBe(0);

    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      await openWorkflow(page, reconcile.workflowId);
      const dialog = await openSignalForm(page);
      // The UI lists `resolve` with the handler's description: what to send, and that it batches.
      const listed = await chooseSignal(dialog, 'resolve');
      expect(listed).toMatch(/^resolve\s+Decide this uncertain key after checking the downstream/);
      await pasteSignalInput(dialog, pasteable);
      await screenshot(page, 'ui-signal-form.png');
      await submitSignal(page, dialog);
    } catch (error) {
      const file = await screenshot(page, 'ui-resolve-failure.png').catch(() => 'none');
      throw new Error(`driving the UI failed (screenshot: ${file})`, { cause: error });
    } finally {
      await page.close();
    }

    // The ReconcileWorkflow completes with exactly what was typed into the form.
    expect(await reconcile.result()).toEqual({
      key,
      applied: true,
      result,
      reason: 'seen in the ledger',
      by: 'ui-test',
      decidedBy: 'signal',
    } satisfies ReconcileResolution);
    // ...and it was the UI's signal: one `resolve` signal in its history, with that input.
    const history = await reconcile.fetchHistory();
    const resolves = (history.events ?? [])
      .map((event) => event.workflowExecutionSignaledEventAttributes)
      .filter((signaled) => signaled?.signalName === 'resolve');
    expect(resolves).toHaveLength(2);
    const payload = resolves[1]!.input!.payloads![0]!;
    expect(JSON.parse(Buffer.from(payload.data!).toString('utf8'))).toEqual(resolution);

    // The caller returns the recorded result, then replays it, and never applies again.
    const [first, second] = (await caller.result()) as SideEffectOutcome<unknown>[];
    expect(first).toEqual({ outcome: 'reconciled', result, key });
    expect(second).toEqual({ outcome: 'replayed', result, key });
    expect(applies.get(key)).toBe(1);
    expect(await ledger(key)).toEqual([written]);

    // The store holds the verdict: done with that result, decided by ui-test for that reason.
    const record = await store.inspect(key);
    expect(record?.state).toBe('done');
    expect(decodeJson(record!.result!)).toEqual(result);
    const events = await store.events(key);
    expect(events.at(-1)).toMatchObject({
      from: 'uncertain',
      to: 'done',
      fence,
      reason: 'seen in the ledger',
      by: 'ui-test',
      // The UI sends its signals without a Temporal identity: recorded as such, not as nothing.
      identity: '(none: the signal carried no identity, as the Temporal web UI sends it)',
      // The worker's database role recorded it, whatever the signal claimed.
      dbUser: expect.any(String),
    });
  }, 480_000);
});
