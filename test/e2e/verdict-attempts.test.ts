/**
 * The episode of issue 38, on the real dev server, through every way a person decides. Attempt 1
 * of a charge goes uncertain without reaching the bank; alice checks it and sends "not applied"
 * with fence 1; attempt 2 reaches the bank and goes uncertain too; bob, who checked only attempt
 * 1, then sends "not applied" again. Before 0.3 every fence-less path decided attempt 2 with
 * bob's verdict (a second charge). Now each path either refuses (the key stays uncertain, one
 * charge) or decides only when the verdict says so on purpose (`"attempt": "any"`,
 * `--any-attempt`, which prints the attempt it decides):
 *
 * - the Temporal web UI in Chromium: bob's verdict without a fence, then the page's template as
 *   shown, both refused and shown on the page; then a verdict naming attempt 2 decides;
 * - `temporal workflow signal --name resolve` without a fence, and the batch signal over
 *   SideEffectResource: refused; `sideeffect resolve --fence 1`: refused as stale; the dry run
 *   lists the attempt; the batch saying `"attempt": "any"` decides;
 * - `sideeffect resolve --any-attempt`: decides, and says which attempt on stderr.
 *
 * Needs: the dev server (search attributes registered, UI with write actions), Postgres,
 * /usr/bin/chromium.
 */
import { randomBytes } from 'node:crypto';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { verdictJson } from '../../src/protocol/wire.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import {
  type ReconcileStatus,
  resolveSignal,
  resolveUpdate,
  type SideEffectOutcome,
  statusQuery,
  waitingQuery,
} from '../../src/workflows/index.js';
import { runCli } from '../support/cli.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import {
  type Harness,
  signalResolveWithCli,
  startHarness,
  temporalCli,
  waitFor,
} from '../temporal/harness.js';
import {
  chooseSignal,
  launchChromium,
  openSignalForm,
  openWorkflow,
  pasteSignalInput,
  screenshot,
  showCurrentDetails,
  submitSignal,
} from './temporal-ui.js';

interface Charge {
  card: string;
  amount: number;
}

let db: FreshSchema;
let store: PgStore;
let h: Harness;
let browser: Browser;
const run = randomBytes(3).toString('hex');
/** Charges the bank recorded, by key: the number the episode is about. */
const bank = new Map<string, string[]>();
const applies = new Map<string, number>();

const effects = {
  charge: defineEffect({
    resource: (input: Charge) => `card:${input.card}`,
    apply: async (input: Charge, { key }) => {
      const attempt = (applies.get(key) ?? 0) + 1;
      applies.set(key, attempt);
      // Attempt 1 never reaches the bank; attempt 2 does, and its answer is lost.
      if (attempt === 1) throw new Error('gateway timeout before the bank answered');
      const charges = bank.get(key) ?? [];
      const id = `ch-${key}-${charges.length + 1}`;
      bank.set(key, [...charges, id]);
      if (attempt === 2) throw new Error('connection reset after the charge was sent');
      return { charge: id, amount: input.amount };
    },
  }),
};

const activity = { heartbeatTimeout: '10 seconds', startToCloseTimeout: '1 minute' };
const bobsVerdict = { applied: false, reason: 'not in the bank export', by: 'bob' };
const cliEnv = () => ({ DATABASE_URL: databaseUrl(), SIDEEFFECT_SCHEMA: db.schema });

beforeAll(async () => {
  db = await freshSchema('verdict_attempts');
  await migrate(db.pool, { schema: db.schema });
  store = new PgStore({ pool: db.pool, schema: db.schema });
  h = await startHarness('verdict-attempts', { store, effects, ttlMs: 5_000 });
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close().catch(() => {});
  await h?.close();
  await db?.drop();
});

/** The key's latest ReconcileWorkflow run, once it waits on `fence`. */
function waitingOn(key: string, fence: number): Promise<ReconcileStatus> {
  const reconcile = h.reconcile(key);
  return waitFor(
    async () => {
      const status = await reconcile.query(statusQuery).catch(() => undefined);
      return status?.state === 'waiting' && status.fence === fence ? status : undefined;
    },
    `reconcile/${key} to wait on attempt ${fence}`,
    120_000,
  );
}

/** Until the status lists `count` refused verdicts. */
function refusedCount(key: string, count: number): Promise<ReconcileStatus> {
  return waitFor(async () => {
    const status = await h.reconcile(key).query(statusQuery);
    return status.rejected.length >= count ? status : undefined;
  }, `${count} refused verdict(s) on reconcile/${key}`);
}

/**
 * Attempt 1 uncertain, alice's "not applied" with fence 1, attempt 2 charged and uncertain: the
 * key's latest ReconcileWorkflow run now waits on attempt 2.
 */
async function episode(name: string) {
  const card = `${name}-${run}`;
  const caller = await h.start('guarded', ['charge', { card, amount: 4200 }, activity]);
  const key = `${caller.workflowId}/charge`;
  await waitingOn(key, 1);
  await h.reconcile(key).executeUpdate(resolveUpdate, {
    args: [{ applied: false, reason: 'attempt 1 not in the bank export', by: 'alice', fence: 1 }],
  });
  const status = await waitingOn(key, 2);
  expect(bank.get(key)).toHaveLength(1);
  return { caller, key, resource: `card:${card}`, status };
}

async function details(key: string): Promise<string> {
  const { currentDetails } = await h
    .reconcile(key)
    .query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  return currentDetails ?? '';
}

const taskFailures = async (key: string) =>
  ((await h.reconcile(key).fetchHistory()).events ?? []).filter(
    (event) => event.workflowTaskFailedEventAttributes,
  ).length;

/** Sends `input` as the `resolve` signal from the workflow's page, as a person does. */
async function sendFromPage(page: Page, workflowId: string, input: string): Promise<void> {
  await openWorkflow(page, workflowId);
  const dialog = await openSignalForm(page);
  await chooseSignal(dialog, 'resolve');
  await pasteSignalInput(dialog, input);
  await submitSignal(page, dialog);
}

describe('every way a person decides names the attempt they checked', () => {
  it('the Temporal UI: no fence, then the template as shown, are refused and shown; the checked attempt decides', async () => {
    const { caller, key, status } = await episode('ui');
    // What the page offers: the attempt judged, how to recognise it, alice's verdict on attempt 1.
    expect(status.earlier).toEqual([
      expect.objectContaining({ fence: 1, applied: false, by: 'alice' }),
    ]);
    expect(status.attempt?.startedAt).toBeDefined();
    expect(status.attempt?.endedAt).toBeDefined();
    const shown = await details(key);
    expect(shown).toContain('**This run judges attempt 2** (fence 2; started ');
    expect(shown).toMatch(/- attempt 1: not applied, by alice at \S+ \(attempt 1 not in the bank/);
    const templates = [...shown.matchAll(/```json\n([\s\S]*?)\n```/g)].map((m) => m[1]!);
    expect(templates).toHaveLength(2);
    expect(JSON.parse(templates[0]!)).toMatchObject({
      applied: true,
      result: '<what the effect returned, as JSON>',
      fence: '<the attempt you checked: 2 is the latest>',
    });
    const notApplied = templates[1]!;
    expect(JSON.parse(notApplied)).toMatchObject({
      applied: false,
      fence: '<the attempt you checked: 2 is the latest>',
    });

    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const workflowId = h.reconcile(key).workflowId;
    try {
      // bob's verdict about attempt 1, as he would type it: no fence.
      await sendFromPage(page, workflowId, verdictJson(bobsVerdict));
      const first = await refusedCount(key, 1);
      expect(first.rejected[0]).toMatchObject({ input: bobsVerdict });
      expect(first.rejected[0]!.error).toMatch(
        /^names no attempt: add "fence": the attempt you checked \(this run judges attempt 2, started .*attempt 1 was decided not applied by alice at /,
      );
      expect(first.rejected[0]!.instead).toEqual({
        ...bobsVerdict,
        fence: '<the attempt you checked: 2 is the latest>',
      });
      // The page itself says it was refused and why (User Metadata > Current Details).
      await openWorkflow(page, workflowId);
      await showCurrentDetails(page, 'Last verdict refused');
      await showCurrentDetails(page, 'names no attempt');
      await screenshot(page, 'ui-verdict-refused.png');

      // The template exactly as the page shows it.
      await sendFromPage(page, workflowId, notApplied);
      const second = await refusedCount(key, 2);
      expect(second.rejected[1]!.error).toMatch(/^fence is still the template's placeholder/);
      expect(await details(key)).toContain("fence is still the template's placeholder");
      expect((await store.inspect(key))?.state).toBe('uncertain');
      expect(bank.get(key)).toHaveLength(1);

      // Someone who checked attempt 2 finds its charge and names that attempt: decided.
      const charge = bank.get(key)![0]!;
      const checked = {
        applied: true,
        result: { charge, amount: 4200 },
        reason: `${charge} in the bank export`,
        by: 'bob',
        fence: 2,
      };
      await sendFromPage(page, workflowId, verdictJson(checked));
    } catch (error) {
      const file = await screenshot(page, 'ui-verdict-attempts-failure.png').catch(() => 'none');
      throw new Error(`driving the UI failed (screenshot: ${file})`, { cause: error });
    } finally {
      await page.close();
    }
    const outcome = (await caller.result()) as SideEffectOutcome<unknown>;
    expect(outcome).toMatchObject({ outcome: 'reconciled', result: { amount: 4200 } });
    expect(bank.get(key)).toHaveLength(1);
    expect(await taskFailures(key)).toBe(0);
    expect(await h.replayAll()).toEqual([]);
  }, 480_000);

  it('temporal workflow signal and the batch signal without a fence are refused; --fence 1 is stale; only "attempt": "any" decides', async () => {
    const { caller, key, resource } = await episode('batch');

    const signaled = await signalResolveWithCli(key, JSON.stringify(bobsVerdict));
    expect(signaled).toMatch(/Signal workflow succeeded/i);
    expect((await refusedCount(key, 1)).rejected[0]!.error).toMatch(/^names no attempt/);

    // The batch the demo used to print, over the key's resource.
    await waitFor(
      async () =>
        (await h.client.workflow.count(waitingQuery(resource))).count === 1 ? true : undefined,
      `visibility to list the waiting key on ${resource}`,
    );
    const batch = (input: object) =>
      temporalCli([
        'workflow',
        'signal',
        '--query',
        waitingQuery(resource),
        '--name',
        resolveSignal.name,
        '--input',
        JSON.stringify(input),
        '--reason',
        'gateway outage',
        '--yes',
      ]);
    await batch(bobsVerdict);
    expect((await refusedCount(key, 2)).rejected[1]!.error).toMatch(/^names no attempt/);

    // bob names the attempt he checked: refused as stale, naming the one uncertain now.
    const stale = await runCli(
      ['resolve', key, '--not-applied', '--fence', '1', '--reason', 'not in the export'],
      cliEnv(),
    );
    expect(stale.code, stale.stdout + stale.stderr).toBe(1);
    expect(stale.stderr).toMatch(/fence 2/);
    expect((await store.inspect(key))?.state).toBe('uncertain');
    expect(bank.get(key)).toHaveLength(1);

    // The dry run lists the attempt a batch would decide, when it started, and what it records.
    const dry = await runCli(
      [
        'resolve',
        '--resource',
        resource,
        '--any-attempt',
        '--not-applied',
        '--reason',
        'not in the bank export',
        '--dry-run',
      ],
      cliEnv(),
    );
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toContain(`  ${key}: not applied on attempt 2 (started `);

    // A batch that says so decides the attempt each run judges: here attempt 2, charged again.
    await batch({ ...bobsVerdict, attempt: 'any' });
    const resolution = (await h.reconcile(key).result()) as ReconcileResolution;
    expect(resolution).toMatchObject({ applied: false, by: 'bob', decidedBy: 'signal' });
    expect(((await caller.result()) as SideEffectOutcome<unknown>).outcome).toBe('applied');
    expect(bank.get(key)).toHaveLength(2);
    expect(await taskFailures(key)).toBe(0);
  }, 300_000);

  it('sideeffect resolve --any-attempt decides the latest attempt and says which', async () => {
    const { caller, key } = await episode('any');
    const resolved = await runCli(
      ['resolve', key, '--any-attempt', '--not-applied', '--reason', 'not in the bank export'],
      cliEnv(),
    );
    expect(resolved.code, resolved.stderr).toBe(0);
    expect(resolved.stderr).toContain(
      "--any-attempt: deciding the attempt with fence 2, the key's latest",
    );
    expect(((await caller.result()) as SideEffectOutcome<unknown>).outcome).toBe('applied');
    expect(bank.get(key)).toHaveLength(2);
  }, 300_000);
});
