/**
 * After an outage an operator decides many keys at once with Temporal's own batch signal over a
 * visibility query on our search attributes: `temporal workflow signal --query '<waiting on
 * resource R>' --name resolve --input <verdict> --yes`. Ten keys wait on two resources; the batch
 * names one resource and says `"attempt": "any"`: exactly its five keys resolve (each
 * ReconcileWorkflow applies the verdict to its own key and attempt), the other five keep waiting, and the server-side batch job is listed on the UI's
 * Batch page (real Chromium against the dev server's UI).
 *
 * Needs: the dev server (search attributes registered by temporal-dev.sh), Postgres, /usr/bin/chromium.
 */
import { randomBytes } from 'node:crypto';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Runner } from '../../src/core/index.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { verdictJson } from '../../src/protocol/wire.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import {
  type ReconcileStatus,
  resolveSignal,
  statusQuery,
  waitingQuery,
} from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { TEMPORAL_NAMESPACE, TEMPORAL_UI_URL } from '../support/temporal.js';
import { type Harness, startHarness, temporalCli, waitFor } from '../temporal/harness.js';
import { launchChromium, screenshot, UI_TIMEOUT_MS } from './temporal-ui.js';

let db: FreshSchema;
let store: PgStore;
let harness: Harness;
let browser: Browser;
const run = randomBytes(3).toString('hex');
const bankA = `card:batch-${run}-A`;
const bankB = `card:batch-${run}-B`;

beforeAll(async () => {
  db = await freshSchema('batch_signal');
  await migrate(db.pool, { schema: db.schema });
  store = new PgStore({ pool: db.pool, schema: db.schema });
  harness = await startHarness('batch-signal', { store, effects: {}, ttlMs: 30_000 });
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close().catch(() => {});
  await harness?.close();
  await db?.drop();
});

/** A key the gateway timed out on: uncertain in the store, its ReconcileWorkflow waiting for a person. */
async function waitingKey(resource: string, n: number): Promise<string> {
  const key = `batch-${run}-${resource.at(-1)}-${n}/charge`;
  const execution = await new Runner(store, { ttlMs: 30_000 }).execute(
    { key, resource },
    async () => {
      throw new Error('gateway timeout after the charge was sent');
    },
  );
  expect(execution.outcome).toBe('uncertain');
  await harness.start(
    'ReconcileWorkflow',
    [{ key, resource, reason: 'gateway timeout after the charge was sent' }],
    `reconcile/${key}`,
  );
  return key;
}

describe('batch verdicts through Temporal batch signal', () => {
  it('signals exactly the waiting keys of one resource; the job shows on the UI Batch page', async () => {
    // One at a time per resource: a second attempt while the first holds the card is contended.
    const onA: string[] = [];
    const onB: string[] = [];
    for (const n of [1, 2, 3, 4, 5]) {
      onA.push(await waitingKey(bankA, n));
      onB.push(await waitingKey(bankB, n));
    }
    await Promise.all([...onA, ...onB].map((key) => harness.waitForReconcile(key, 'waiting')));

    // Visibility is eventually consistent: the batch sees what the query sees.
    const { client } = harness;
    for (const resource of [bankA, bankB]) {
      await waitFor(
        async () =>
          (await client.workflow.count(waitingQuery(resource))).count === 5 ? true : undefined,
        `visibility to list 5 waiting keys on ${resource}`,
      );
    }

    // One verdict for many keys cannot name each key's attempt: it says "any attempt" on purpose.
    const verdict = { applied: false, reason: 'bank export: no such charge', by: 'ops-batch' };
    const started = await temporalCli([
      'workflow',
      'signal',
      '--query',
      waitingQuery(bankA),
      '--name',
      resolveSignal.name,
      '--input',
      verdictJson({ ...verdict, attempt: 'any' }),
      '--reason',
      `gateway outage on ${bankA}`,
      '--yes',
    ]);
    const jobId = /job ID:\s*(\S+)/i.exec(started)?.[1];
    expect(jobId, started).toBeDefined();

    // Every key on A is decided by the signal, in its own workflow and in the store.
    for (const key of onA) {
      const resolution = (await harness.reconcile(key).result()) as ReconcileResolution;
      expect(resolution).toEqual({ key, ...verdict, decidedBy: 'signal' });
      expect((await store.inspect(key))?.state).toBe('free');
      expect((await store.events(key)).at(-1)).toMatchObject({
        from: 'uncertain',
        to: 'free',
        by: 'ops-batch',
        reason: verdict.reason,
      });
    }

    // The batch job finished over exactly five workflows.
    const job = await waitFor(async () => {
      const described = JSON.parse(
        await temporalCli(['batch', 'describe', '--job-id', jobId!, '--output', 'json']),
      );
      return String(described.state).includes('COMPLETED') ? described : undefined;
    }, `batch job ${jobId} to complete`);
    expect(Number(job.totalOperationCount)).toBe(5);
    expect(Number(job.completeOperationCount)).toBe(5);

    // B was never signaled: still waiting, still uncertain, no resolve in its history.
    for (const key of onB) {
      const status = (await harness.reconcile(key).query(statusQuery)) as ReconcileStatus;
      expect(status).toMatchObject({ state: 'waiting', rejected: [] });
      expect((await store.inspect(key))?.state).toBe('uncertain');
      const history = await harness.reconcile(key).fetchHistory();
      const signals = (history.events ?? []).filter(
        (event) => event.workflowExecutionSignaledEventAttributes?.signalName === 'resolve',
      );
      expect(signals).toEqual([]);
    }
    expect((await client.workflow.count(waitingQuery(bankB))).count).toBe(5);

    // The operator finds the job on the UI's Batch page.
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      await page.goto(
        `${TEMPORAL_UI_URL}/namespaces/${encodeURIComponent(TEMPORAL_NAMESPACE)}/batch-operations`,
        { timeout: UI_TIMEOUT_MS },
      );
      await page.getByText(jobId!).first().waitFor({ timeout: UI_TIMEOUT_MS });
      await screenshot(page, 'ui-batch-operations.png');
      await page.getByText(jobId!).first().click();
      await page
        .getByText(`gateway outage on ${bankA}`)
        .first()
        .waitFor({ timeout: UI_TIMEOUT_MS });
      await page.getByText('5 succeeded').first().waitFor({ timeout: UI_TIMEOUT_MS });
      await page.getByText('0 failed').first().waitFor({ timeout: UI_TIMEOUT_MS });
      await screenshot(page, 'ui-batch-operation.png');
    } catch (error) {
      const file = await screenshot(page, 'ui-batch-failure.png').catch(() => 'none');
      throw new Error(`the UI Batch page does not show job ${jobId} (screenshot: ${file})`, {
        cause: error,
      });
    } finally {
      await page.close();
    }
  }, 240_000);
});
