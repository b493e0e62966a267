/**
 * The scenarios whose workflow histories a release records (applied, replayed, waiting,
 * reconciled by signal, Update and probe, a `recheck` signal before the Update, a fan-out, a
 * caller cancelled while its effect applies, refused verdicts, a forged `reconciled` signal, a
 * caller paused by a breaker a person opened (waiting it out, or giving up at `maxPause`), a
 * reconcile shown a pending verdict that refuses an oversized verdict, looks for its search
 * attributes late and continues as new), driven on a Temporal server against one worker running
 * ./workflows.ts and the MemoryStore it is given.
 * ./record.ts writes them to test/histories/<version>/; the rollback test
 * (test/rollback/previous-minor.test.ts) runs them with and without `compatibleWith` and replays
 * them with 0.1.0's workflow code.
 */
import type { Client, WorkflowHandle } from '@temporalio/client';
import { defineEffect } from '../../src/activities/index.js';
import { encodeJson } from '../../src/core/json.js';
import { type WorkflowPatch, workflowPatches } from '../../src/protocol/patches.js';
import { reconciledSignal } from '../../src/protocol/wire.js';
import { MemoryFencedSink, type MemoryStore } from '../../src/store/memory.js';
import {
  type ReconcileStatus,
  recheckSignal,
  reconcileWorkflowId,
  resolveSignal,
  resolveUpdate,
  statusQuery,
} from '../../src/workflows/index.js';

interface Order {
  account: string;
  amount: number;
  /** How the first apply of the key fails: after the downstream took the write, or before. */
  fail?: 'after-write' | 'before-write';
  /** The probe cannot tell. */
  blindProbe?: boolean;
  /** The apply takes this long (the caller is cancelled meanwhile). */
  slowMs?: number;
}

const sink = new MemoryFencedSink();
const ledger: Array<{ key: string; amount: number }> = [];
const attempts = new Map<string, number>();
/** Keys whose apply has started: the cancellation scenario cancels once its key is here. */
const applying = new Set<string>();

async function applyOrder(input: Order, key: string, resource: string, fence: number) {
  const attempt = (attempts.get(key) ?? 0) + 1;
  attempts.set(key, attempt);
  applying.add(key);
  if (input.slowMs) await new Promise((resolve) => setTimeout(resolve, input.slowMs));
  if (input.fail === 'before-write' && attempt === 1) throw new Error('connection refused');
  const line = await sink.writeFenced(resource, fence, async () =>
    ledger.push({ key, amount: input.amount }),
  );
  if (input.fail === 'after-write' && attempt === 1)
    throw new Error('connection reset after the write');
  return { receipt: `r-${line}` };
}

/** The breaker group of `pausedOrder`, which the paused scenarios open by hand. */
const PAUSED_GROUP = 'histories-maintenance';

/** The effects of record.ts, so the same calls run. */
export const effects = {
  order: defineEffect({
    resource: (input: Order) => `account:${input.account}`,
    apply: (input: Order, { key, lease }) => applyOrder(input, key, lease.resource, lease.fence),
  }),
  probedOrder: defineEffect({
    resource: (input: Order) => `account:${input.account}`,
    apply: (input: Order, { key, lease }) => applyOrder(input, key, lease.resource, lease.fence),
    probe: async (input: Order, { key, resource, fence }) => {
      if (input.blindProbe) return undefined;
      return sink.readFenced(resource, fence, async () => {
        const line = ledger.findIndex((entry) => entry.key === key);
        return line < 0
          ? { applied: false as const }
          : { applied: true as const, result: { receipt: `r-${line + 1}` } };
      });
    },
  }),
  /** `order` behind a breaker (a short cool-down: a paused caller's first waits are 1 s). */
  pausedOrder: defineEffect({
    resource: (input: Order) => `account:${input.account}`,
    breaker: { group: PAUSED_GROUP, coolDownMs: 200, maxCoolDownMs: 400 },
    apply: (input: Order, { key, lease }) => applyOrder(input, key, lease.resource, lease.fence),
  }),
  /** `order` whose verdicts must carry the receipt it returns. */
  checkedOrder: defineEffect({
    resource: (input: Order) => `account:${input.account}`,
    apply: (input: Order, { key, lease }) => applyOrder(input, key, lease.resource, lease.fence),
    result: (result: unknown) =>
      typeof (result as { receipt?: unknown } | null)?.receipt === 'string' || 'needs a receipt',
  }),
};

/** The workflow patches the scenarios reach when nothing holds them: every one declared. */
export const patchesReached: readonly string[] = (
  [
    'breakerPausedBackoff',
    'breakerPausedWait',
    'pendingVerdictsShown',
    'reconcileContinueAsNew',
    'reconcileLateSearchAttributes',
    'resolveSizeLimit',
    'effectWaitCancellation',
    'heldVerdicts',
    'namespacedActivities',
    'recheckBackoff',
    'reconciledReadsStore',
    'reconcileRecheckStore',
    'verdictContext',
    'resolveSignalFence',
    'verdictNamesAttempt',
  ] as const satisfies readonly WorkflowPatch[]
).map((patch) => workflowPatches[patch].id);

export interface Recorded {
  name: string;
  /** What the run went through, for the release's manifest. */
  description: string;
  workflowId: string;
  /** The history as the client fetched it: a prefix for a run still open. */
  history: unknown;
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Sends a verdict from a person the way either kind of run takes it: naming the attempt (`fence`),
 * which a run held to 0.1 refuses as an unknown field; then, only once that refusal shows, without
 * it, as 0.1.0 takes it. A run of this release never receives the fence-less one (it would refuse
 * it for naming no attempt), so the patches its history takes stay the same from run to run.
 */
async function decideBySignal(
  handle: WorkflowHandle,
  verdict: Record<string, unknown>,
): Promise<void> {
  const { fence } = await handle.query(statusQuery);
  await handle.signal(resolveSignal, { ...verdict, fence } as never);
  const held = await waitFor('the verdict naming its attempt to decide or be refused', async () => {
    const status = await handle.query(statusQuery);
    if (status.rejected.some((rejected) => rejected.error.startsWith('unknown field(s) fence')))
      return true;
    return status.state === 'resolving' || status.state === 'resolved' ? false : undefined;
  });
  if (held) await handle.signal(resolveSignal, verdict as never);
}

/**
 * Runs every scenario on `taskQueue` (whose worker runs ./workflows.ts's frozen callers on
 * `store`, where a person opens a breaker and a verdict waits) and returns their histories, named as test/histories/0.1.0/ names them. `tag` starts every workflow
 * id and account, so two runs on one server never meet.
 */
export async function runScenarios(
  client: Client,
  taskQueue: string,
  tag: string,
  store: MemoryStore,
): Promise<Recorded[]> {
  const recorded: Recorded[] = [];
  let sequence = 0;
  const activity = { heartbeatTimeout: '10 seconds', startToCloseTimeout: '1 minute' };
  const start = (workflow: string, args: unknown[]): Promise<WorkflowHandle> =>
    client.workflow.start(workflow, {
      taskQueue,
      workflowId: `${tag}-${workflow}-${Date.now().toString(36)}-${++sequence}`,
      args,
    });
  const record = async (name: string, description: string, handle: WorkflowHandle) => {
    const history = await handle.fetchHistory();
    recorded.push({ name, description, workflowId: handle.workflowId, history });
  };
  const reconcileIn = async (key: string, state: ReconcileStatus['state']) => {
    const handle = client.workflow.getHandle(reconcileWorkflowId(key));
    await waitFor(`reconcile/${key} to be ${state}`, async () => {
      const status = await handle.query(statusQuery);
      return status.state === state ? status : undefined;
    });
    return handle;
  };
  const keyOf = (handle: WorkflowHandle) => `${handle.workflowId}/pay`;

  const applied = await start('guarded', ['order', { account: `${tag}-1`, amount: 5 }, activity]);
  await applied.result();
  await record('caller-applied', 'one guarded call that applies', applied);

  const replayed = await start('guardedTwice', [
    'order',
    { account: `${tag}-2`, amount: 6 },
    { ...activity, step: 'pay' },
  ]);
  await replayed.result();
  await record('caller-replayed', 'the same step twice: applied, then replayed', replayed);

  const bySignal = await start('guarded', [
    'order',
    { account: `${tag}-3`, amount: 7, fail: 'after-write' },
    { ...activity, step: 'pay', recheckEvery: '1 second' },
  ]);
  const signalled = await reconcileIn(keyOf(bySignal), 'waiting');
  await signalled.signal(resolveSignal, { applied: 'yes' } as never);
  await sleep(3_500);
  await record(
    'caller-waiting',
    'a caller waiting for a verdict, rechecking every second',
    bySignal,
  );
  await record(
    'reconcile-waiting',
    'waiting for a person: a malformed signal refused, reminders every second',
    signalled,
  );
  await decideBySignal(signalled, {
    applied: true,
    result: { receipt: 'r-3' },
    reason: 'the bank export lists it',
    by: 'ops@example.com',
  });
  await bySignal.result();
  await record(
    'caller-reconciled-applied',
    'a caller that waited; the verdict was applied, so the recorded result returns',
    bySignal,
  );
  await signalled.result();
  await record('reconcile-resolved-signal', 'resolved by a resolve signal (applied)', signalled);

  const byUpdate = await start('guarded', [
    'probedOrder',
    { account: `${tag}-4`, amount: 8, fail: 'before-write', blindProbe: true },
    { ...activity, step: 'pay' },
  ]);
  const updated = await reconcileIn(keyOf(byUpdate), 'waiting');
  // As `sideeffect resolve` sends after a verdict recorded in the store only (here: none yet).
  await updated.signal(recheckSignal);
  await sleep(1_500);
  // The Update takes `fence` in every run, held or not.
  const { fence: updatedFence } = await updated.query(statusQuery);
  await updated.executeUpdate(resolveUpdate, {
    args: [
      {
        applied: false,
        reason: 'not in the bank export',
        by: 'ops@example.com',
        fence: updatedFence!,
      },
    ],
  });
  await byUpdate.result();
  await record(
    'caller-reconciled-not-applied',
    'a caller that waited; the verdict was not applied, so the effect ran again',
    byUpdate,
  );
  await updated.result();
  await record(
    'reconcile-resolved-update',
    'a blind probe, a recheck signal, then resolved by the resolve Update (not applied)',
    updated,
  );

  const byProbe = await start('guarded', [
    'probedOrder',
    { account: `${tag}-5`, amount: 9, fail: 'after-write' },
    { ...activity, step: 'pay' },
  ]);
  await byProbe.result();
  await record('caller-reconciled-probe', 'a caller whose key the probe decided', byProbe);
  const probed = client.workflow.getHandle(reconcileWorkflowId(keyOf(byProbe)));
  await probed.result();
  await record('reconcile-probed', 'decided by the probe (applied)', probed);

  // Five orders, at most two at a time: which activities each workflow task schedules.
  const fannedOut = await start('fanOut', [
    'order',
    [1, 2, 3, 4, 5].map((n) => ({ account: `${tag}-7-${n}`, amount: n })),
    2,
    activity,
  ]);
  await fannedOut.result();
  await record(
    'caller-fan-out',
    'five guarded calls, at most two in flight (sideEffects)',
    fannedOut,
  );

  // Cancelled while the apply runs: the caller's cancellation type decides how it ends.
  const cancelled = await start('guarded', [
    'order',
    { account: `${tag}-6`, amount: 10, slowMs: 2_000 },
    { ...activity, step: 'pay' },
  ]);
  await waitFor('the apply to start', async () => applying.has(keyOf(cancelled)) || undefined);
  await cancelled.cancel();
  await cancelled.result().catch(() => undefined);
  await record('caller-cancelled', 'a caller cancelled while its effect applies', cancelled);

  // What this release refuses, a held run refuses too, in a way 0.1.0 replays: a result the
  // effect's check refuses, a verdict for another attempt, and a `resolve` signal naming its
  // attempt (0.1.0 refused the field, so a held run does; the same verdict without it, as sent
  // to a 0.1.0 worker during a rollback, decides).
  const refusals = await start('guarded', [
    'checkedOrder',
    { account: `${tag}-8`, amount: 12, fail: 'after-write' },
    { ...activity, step: 'pay' },
  ]);
  const refusing = await reconcileIn(keyOf(refusals), 'waiting');
  const { fence } = await refusing.query(statusQuery);
  const verdict = { reason: 'the bank export lists it', by: 'ops@example.com' };
  const refusedUpdate = async (input: Record<string, unknown>) => {
    const refused = await refusing
      .executeUpdate(resolveUpdate, { args: [{ ...verdict, ...input } as never] })
      .then(() => false)
      .catch(() => true);
    if (!refused) throw new Error(`${JSON.stringify(input)} was not refused`);
  };
  await refusedUpdate({ applied: true, result: null, fence });
  await refusedUpdate({ applied: false, fence: (fence ?? 0) + 7 });
  const receipt = { applied: true, result: { receipt: 'r-8' }, ...verdict };
  await decideBySignal(refusing, receipt);
  const decided = (await refusals.result()) as { result: unknown };
  if (JSON.stringify(decided.result) !== JSON.stringify({ receipt: 'r-8' }))
    throw new Error(`the caller returned ${JSON.stringify(decided)}`);
  await record(
    'caller-refusals',
    'a caller whose reconcile refused verdicts before one decided',
    refusals,
  );
  await refusing.result();
  await record(
    'reconcile-refusals',
    'refused: applied without a result, another attempt; then a resolve signal naming its attempt',
    refusing,
  );

  // A `reconciled` signal sent by hand, while the store still says uncertain: the caller must not
  // return it. A held caller checks it against the store too (it does not name the caller's run,
  // as a reconcile's signal does), which 0.1.0 cannot replay: the one held scenario that does not.
  const forged = await start('guarded', [
    'order',
    { account: `${tag}-9`, amount: 13, fail: 'after-write' },
    { ...activity, step: 'pay' },
  ]);
  const forgedReconcile = await reconcileIn(keyOf(forged), 'waiting');
  await waitFor('the caller to subscribe', async () =>
    (await forgedReconcile.query(statusQuery)).subscribers.length > 0 ? true : undefined,
  );
  await forged.signal(reconciledSignal, {
    key: keyOf(forged),
    applied: true,
    result: { receipt: 'FORGED' },
  });
  await sleep(1_500);
  await decideBySignal(forgedReconcile, {
    applied: true,
    result: { receipt: 'r-9' },
    reason: 'the bank export lists it',
    by: 'ops@example.com',
  });
  const returned = (await forged.result()) as { result: unknown };
  if (JSON.stringify(returned.result) !== JSON.stringify({ receipt: 'r-9' }))
    throw new Error(`the caller returned ${JSON.stringify(returned)}`);
  await record(
    'caller-forged',
    'a forged reconciled signal checked against the store; the verdict returns',
    forged,
  );

  // A verdict that names no attempt, as the UI, `temporal workflow signal` or a batch sends it:
  // from 0.3 on refused (the page shows the key's latest run, whatever attempt the person
  // checked), so the verdict naming its attempt decides; a run held to 0.1 or 0.2 takes it for
  // its own attempt, as those releases did, and the second never matters.
  const unnamed = await start('guarded', [
    'order',
    { account: `${tag}-10`, amount: 14, fail: 'after-write' },
    { ...activity, step: 'pay' },
  ]);
  const unnamedReconcile = await reconcileIn(keyOf(unnamed), 'waiting');
  const unnamedVerdict = {
    applied: true,
    result: { receipt: 'r-10' },
    reason: 'the bank export lists it',
    by: 'ops@example.com',
  };
  await unnamedReconcile.signal(resolveSignal, unnamedVerdict);
  const refusedUnnamed = await waitFor(
    'the verdict naming no attempt to decide or be refused',
    async () => {
      const status = await unnamedReconcile.query(statusQuery).catch(() => undefined);
      if (status === undefined) return false;
      if (status.rejected.some((rejected) => rejected.error.startsWith('names no attempt')))
        return true;
      return status.state === 'resolving' || status.state === 'resolved' ? false : undefined;
    },
  );
  if (refusedUnnamed) await decideBySignal(unnamedReconcile, unnamedVerdict);
  const unnamedResult = (await unnamed.result()) as { result: unknown };
  if (JSON.stringify(unnamedResult.result) !== JSON.stringify({ receipt: 'r-10' }))
    throw new Error(`the caller returned ${JSON.stringify(unnamedResult)}`);
  await unnamedReconcile.result();
  await record(
    'reconcile-unnamed-verdict',
    'a resolve signal naming no attempt (refused from 0.3 on), then one naming its attempt',
    unnamedReconcile,
  );

  // A person opens the provider's breaker for its maintenance; a caller with one attempt per
  // activity call pauses (from 0.3 on it waits, its waits doubling from 0.4 on; a run held to an
  // earlier release fails at the first refusal, as those did), then the person closes it.
  const maintenance = { by: 'ops@example.com', identity: 'histories' };
  await store.setBreaker(PAUSED_GROUP, {
    state: 'open',
    reason: "the provider's maintenance",
    ...maintenance,
  });
  const oneAttempt = { ...activity, step: 'pay', retry: { maximumAttempts: 1 } };
  const paused = await start('guarded', [
    'pausedOrder',
    { account: `${tag}-11`, amount: 15 },
    oneAttempt,
  ]);
  const givenUp = await start('guarded', [
    'pausedOrder',
    { account: `${tag}-12`, amount: 16 },
    { ...oneAttempt, maxPause: '2 seconds' },
  ]);
  // Each has waited enough, or ended. A run held to 0.3 knows no maxPause: it waits on like the
  // other caller, until the person closes the breaker below.
  const waited = async (run: typeof paused, turns: number) => {
    const { events } = await run.fetchHistory();
    const timers = (events ?? []).filter((event) => event.timerStartedEventAttributes != null);
    if (timers.length >= turns) return true;
    return (await run.describe()).status.name === 'RUNNING' ? undefined : true;
  };
  await waitFor('the paused callers to wait, or to fail', async () =>
    (await waited(paused, 2)) && (await waited(givenUp, 3)) ? true : undefined,
  );
  await store.setBreaker(PAUSED_GROUP, {
    state: 'closed',
    reason: 'maintenance over',
    ...maintenance,
  });
  await paused.result().catch(() => undefined);
  await givenUp.result().catch(() => undefined);
  await record(
    'caller-paused',
    'a caller paused by a breaker a person opened: it waits (1 s, then 2 s) until the person closes it',
    paused,
  );
  await record(
    'caller-paused-given-up',
    'a caller paused by a breaker a person opened, failing with SideEffectPaused at its maxPause',
    givenUp,
  );

  // A reconcile started memo-only (before the search attributes were registered) on a key with
  // a verdict pending in the store that no worker can judge (the run names no effect): it shows
  // the verdict, asks for its search attributes at its first reminder, refuses an oversized
  // verdict and continues as new (its history past 1 MiB). A run held to 0.1 does none of that:
  // it takes the oversized verdict to the store, which refuses it, and keeps waiting.
  const uncertain = await start('guarded', [
    'order',
    { account: `${tag}-13`, amount: 17, fail: 'after-write' },
    { ...activity, step: 'pay', onUncertain: 'throw' },
  ]);
  await uncertain.result().catch(() => undefined);
  const lateKey = keyOf(uncertain);
  await store.addPendingVerdict(lateKey, {
    applied: true,
    result: encodeJson({ receipt: 'r-13' }),
    reason: 'the bank export lists it',
    by: 'ops@example.com',
  });
  const continued = await client.workflow.start('ReconcileWorkflow', {
    taskQueue,
    workflowId: reconcileWorkflowId(lateKey),
    args: [
      {
        key: lateKey,
        resource: `account:${tag}-13`,
        reason: 'connection reset after the write',
        searchAttributes: false,
        remindEveryMs: 1_000,
        // Not before the first reminder, whatever the events before it.
        continueAsNewAfterEvents: 40,
      },
    ],
  });
  const firstRun = client.workflow.getHandle(continued.workflowId, continued.firstExecutionRunId);
  // After its first reminder (which asks for the search attributes): the oversized verdict takes
  // the history past 1 MiB, and a run that refuses it then continues as new at once.
  await waitFor('the first reminder', async () => {
    const { events } = await firstRun.fetchHistory();
    return (events ?? []).some((event) => event.timerFiredEventAttributes != null)
      ? true
      : undefined;
  });
  await continued.signal(resolveSignal, {
    applied: true,
    result: { receipt: 'x'.repeat(1024 * 1024) },
    reason: 'pasted the whole export',
    by: 'ops@example.com',
  } as never);
  await waitFor('the reconcile to continue as new, or (held) to remind a few times', async () => {
    if ((await firstRun.describe()).status.name === 'CONTINUED_AS_NEW') return true;
    const { events } = await firstRun.fetchHistory();
    return (events ?? []).length >= 50 ? true : undefined;
  });
  await record(
    'reconcile-continued',
    'memo-only, a verdict pending in the store shown, an oversized verdict refused, search attributes asked for late; continued as new',
    firstRun,
  );
  await continued.terminate('scenario recorded');

  return recorded;
}
