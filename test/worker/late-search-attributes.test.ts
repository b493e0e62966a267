/**
 * ReconcileWorkflows opened before the SideEffect* search attributes were registered (memo-only)
 * pick them up once they are: at a `recheck` signal, a reminder and a continue-as-new, each
 * upserting only what the namespace has registered; one opened after registration is indexed
 * from its start. On a fresh namespace of the dev server: memo-only reconciles wait; one
 * attribute is registered (what the old printed command did), then the other two; after
 * docs/production.md's `recheck` batch, docs/operations.md's waiting query finds every one,
 * Temporal's batch signal over it decides every one on its resource, and
 * `sideeffect resolve --resource` the others. On a namespace that never registers them, the
 * reconciles keep asking without a single failed workflow task and still resolve.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Runner } from '../../src/core/index.js';
import type { ReconcileInput, ReconcileResolution } from '../../src/protocol/wire.js';
import { libraryActivityNames, verdictJson } from '../../src/protocol/wire.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { missingSearchAttributes, SideEffectPlugin } from '../../src/worker/index.js';
import { searchAttributeCreateCommand } from '../../src/worker/search-attributes.js';
import {
  type ReconcileStatus,
  recheckSignal,
  reconcileWorkflowId,
  resolveSignal,
  statusQuery,
  waitingQuery,
} from '../../src/workflows/index.js';
import { runCli } from '../support/cli.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import {
  freshNamespace,
  REPO_ROOT,
  runPrinted,
  SEARCH_ATTRIBUTES,
  TEMPORAL_ADDRESS,
  temporalCliPath,
  uniqueTaskQueue,
} from '../support/temporal.js';
import { testBundle, waitFor } from '../temporal/harness.js';

/** Visibility on the dev server is eventually consistent, and registration reaches the worker's cache within 10 s. */
const SETTLE_MS = 90_000;

let db: FreshSchema;
let store: PgStore;
let connection: Connection;
let native: NativeConnection;

beforeAll(async () => {
  db = await freshSchema('late_sa');
  await migrate(db.pool, { schema: db.schema });
  store = new PgStore({ pool: db.pool, schema: db.schema });
  connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
}, 60_000);

afterAll(async () => {
  await native?.close();
  await connection?.close();
  await db?.drop();
});

interface Namespace {
  name: string;
  client: Client;
  taskQueue: string;
  plugin: SideEffectPlugin;
  handles: WorkflowHandle[];
  close(): Promise<void>;
}

/** A fresh namespace without the attributes, and a worker on it (default plugin mode: memo-only with a warning). */
async function namespaceWithWorker(prefix: string): Promise<Namespace> {
  const name = await freshNamespace(prefix);
  const client = new Client({ connection, namespace: name });
  const taskQueue = uniqueTaskQueue(prefix);
  // The new namespace answers once the frontend's cache has it.
  await missingBecomes(client, [...SEARCH_ATTRIBUTES]);
  const plugin = new SideEffectPlugin({
    client,
    store,
    effects: {},
    ttlMs: 30_000,
    sweepEveryMs: 0,
  });
  const worker = await Worker.create({
    connection: native,
    namespace: name,
    taskQueue,
    workflowBundle: await testBundle(),
    plugins: [plugin],
  });
  const running = worker.run();
  const handles: WorkflowHandle[] = [];
  return {
    name,
    client,
    taskQueue,
    plugin,
    handles,
    async close() {
      for (const handle of handles) await handle.terminate('test finished').catch(() => {});
      worker.shutdown();
      await running;
    },
  };
}

function missingBecomes(client: Client, expected: string[]): Promise<string[]> {
  return waitFor(
    async () => {
      const missing = await missingSearchAttributes(client, client.options.namespace).catch(
        () => undefined,
      );
      return JSON.stringify(missing) === JSON.stringify(expected) ? missing : undefined;
    },
    `namespace ${client.options.namespace} to lack exactly ${expected.join(', ') || 'nothing'}`,
    SETTLE_MS,
  );
}

/** Uncertain keys in the store (a timeout after the write), then the sweep opens their ReconcileWorkflows the way the worker does. */
async function openReconciles(
  ns: Namespace,
  resource: string,
  count: number,
  tag = '',
): Promise<string[]> {
  const keys: string[] = [];
  for (let n = 1; n <= count; n++) {
    const key = `${ns.name}-${resource}-${tag}${n}/charge`;
    const execution = await new Runner(store, { ttlMs: 30_000 }).execute(
      { key, resource },
      async () => {
        throw new Error('gateway timeout after the charge was sent');
      },
    );
    expect(execution.outcome).toBe('uncertain');
    keys.push(key);
  }
  const report = await ns.plugin.activities[libraryActivityNames.sweepAndReconcile]();
  expect(report.reconciling).toEqual(expect.arrayContaining(keys));
  for (const key of keys) ns.handles.push(ns.client.workflow.getHandle(reconcileWorkflowId(key)));
  await Promise.all(keys.map((key) => waitForState(ns, key, 'waiting')));
  return keys;
}

function handleOf(ns: Namespace, key: string): WorkflowHandle {
  return ns.client.workflow.getHandle(reconcileWorkflowId(key));
}

function waitForState(
  ns: Namespace,
  key: string,
  state: ReconcileStatus['state'],
): Promise<ReconcileStatus> {
  return waitFor(async () => {
    const status = (await handleOf(ns, key)
      .query(statusQuery)
      .catch(() => undefined)) as ReconcileStatus | undefined;
    return status?.state === state ? status : undefined;
  }, `${key} to be ${state}`);
}

/** Every event of the workflow's runs, oldest run first. */
async function allEvents(ns: Namespace, key: string): Promise<HistoryEvent[]> {
  const events: HistoryEvent[] = [];
  const runs = ns.client.workflow.list({
    query: `WorkflowId=${JSON.stringify(reconcileWorkflowId(key))}`,
  });
  for await (const run of runs) {
    const history = await ns.client.workflow.getHandle(run.workflowId, run.runId).fetchHistory();
    events.push(...(history.events ?? []));
  }
  return events;
}

type HistoryEvent = NonNullable<
  Awaited<ReturnType<WorkflowHandle['fetchHistory']>>['events']
>[number];
/** WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND */
const UNHANDLED_COMMAND = 1;

/**
 * Failed workflow tasks (an unregistered attribute upserted fails one with BAD_SEARCH_ATTRIBUTES),
 * but for UNHANDLED_COMMAND: the server's answer to a continue-as-new that a signal overtook,
 * which the next task redoes with the signal (the pokes below race it on purpose).
 */
const failedTasks = (events: HistoryEvent[]) =>
  events.filter(
    (event) =>
      event.workflowTaskFailedEventAttributes != null &&
      event.workflowTaskFailedEventAttributes.cause !== UNHANDLED_COMMAND,
  );

const registrationAsks = (events: HistoryEvent[]) =>
  events.filter(
    (event) =>
      event.activityTaskScheduledEventAttributes?.activityType?.name ===
      libraryActivityNames.registeredSearchAttributes,
  );

/** The search attributes of the current run, as the server has them. */
async function attributesOf(ns: Namespace, key: string): Promise<Record<string, unknown>> {
  const { searchAttributes } = await handleOf(ns, key).describe();
  return Object.fromEntries(
    Object.entries(searchAttributes).filter(([name]) => name.startsWith('SideEffect')),
  );
}

/**
 * An uncertain key whose ReconcileWorkflow is started directly as the starter starts one while the
 * attributes are missing (`searchAttributes: false`), with input options the worker does not set.
 */
async function memoOnlyReconcile(
  ns: Namespace,
  key: string,
  resource: string,
  options: Pick<ReconcileInput, 'continueAsNewAfterEvents' | 'remindEveryMs'>,
): Promise<WorkflowHandle> {
  const execution = await new Runner(store, { ttlMs: 30_000 }).execute(
    { key, resource },
    async () => {
      throw new Error('gateway timeout after the charge was sent');
    },
  );
  expect(execution.outcome).toBe('uncertain');
  const input: ReconcileInput = {
    key,
    resource,
    reason: 'gateway timeout after the charge was sent',
    fence: (await store.inspect(key))!.fence,
    searchAttributes: false,
    ...options,
  };
  const handle = await ns.client.workflow.start('ReconcileWorkflow', {
    workflowId: reconcileWorkflowId(key),
    taskQueue: ns.taskQueue,
    args: [input],
  });
  ns.handles.push(handle);
  await waitForState(ns, key, 'waiting');
  return handle;
}

/** Sends `recheck` to each key until `done` holds (each recheck asks the worker again; its answer is cached up to 10 s). */
async function recheckUntil<T>(
  ns: Namespace,
  keys: string[],
  done: () => Promise<T | undefined>,
  what: string,
): Promise<T> {
  let last = 0;
  return waitFor(
    async () => {
      if (Date.now() - last > 2_000) {
        last = Date.now();
        await Promise.all(keys.map((key) => handleOf(ns, key).signal(recheckSignal)));
      }
      return done();
    },
    what,
    SETTLE_MS,
  );
}

const count = async (ns: Namespace, query: string) => (await ns.client.workflow.count(query)).count;

const keysQuery = (keys: string[]) =>
  `WorkflowType="ReconcileWorkflow" AND ExecutionStatus="Running" AND SideEffectKey IN (${keys.map((key) => JSON.stringify(key)).join(', ')})`;

describe('search attributes registered after the reconciles opened', () => {
  let ns: Namespace;

  beforeAll(async () => {
    ns = await namespaceWithWorker('late-sa');
  }, 120_000);

  afterAll(async () => {
    await ns?.close();
  });

  it('are upserted at a recheck, a reminder and a continue-as-new, so the waiting query and both batch verdicts find every reconcile', async () => {
    const bankA = `card:${ns.name}-A`;
    const bankB = `card:${ns.name}-B`;
    const onA = await openReconciles(ns, bankA, 4);
    const onB = await openReconciles(ns, bankB, 2);
    const waiting = [...onA, ...onB];

    // A memo-only reconcile that continues as new often, asked only by its continue-as-new.
    const keyC = `${ns.name}-C/charge`;
    const handleC = await memoOnlyReconcile(ns, keyC, bankB, { continueAsNewAfterEvents: 20 });
    /** A subscribe signal grows the history: every few, the run continues as new. */
    const poke = () => handleC.signal('subscribe', { workflowId: `${ns.name}-poke` });

    // Nothing registered: every recheck asks, nothing is upserted, no workflow task fails.
    await recheckUntil(
      ns,
      waiting,
      async () => {
        const asked = await Promise.all(
          waiting.map(async (key) => registrationAsks(await allEvents(ns, key)).length),
        );
        return asked.every((n) => n >= 1) ? true : undefined;
      },
      'every reconcile to ask which attributes are registered',
    );
    await waitFor(
      async () => {
        await poke();
        const status = (await handleC.query(statusQuery)) as ReconcileStatus;
        return (status.runs ?? 0) >= 2 ? true : undefined;
      },
      'C to continue as new twice',
      SETTLE_MS,
    );
    for (const key of [...waiting, keyC]) {
      expect(failedTasks(await allEvents(ns, key)), key).toEqual([]);
      expect(await attributesOf(ns, key), key).toEqual({});
    }

    // Only SideEffectKey registered (what the old printed command did): only it is upserted.
    await runPrinted(searchAttributeCreateCommand(ns.name, ['SideEffectKey']));
    await missingBecomes(ns.client, ['SideEffectResource', 'SideEffectState']);
    await recheckUntil(
      ns,
      waiting,
      async () => ((await count(ns, keysQuery(waiting))) === waiting.length ? true : undefined),
      `SideEffectKey on all ${waiting.length} reconciles`,
    );
    for (const key of waiting) {
      expect(failedTasks(await allEvents(ns, key)), key).toEqual([]);
      expect(await attributesOf(ns, key), key).toEqual({ SideEffectKey: [key] });
    }

    // The other two.
    await runPrinted(
      searchAttributeCreateCommand(ns.name, ['SideEffectResource', 'SideEffectState']),
    );
    await missingBecomes(ns.client, []);

    // The continue-as-new alone (no recheck, no reminder) indexes C.
    const runsBefore = ((await handleC.query(statusQuery)) as ReconcileStatus).runs ?? 0;
    await waitFor(
      async () => {
        await poke();
        const query = `${waitingQuery(bankB)} AND SideEffectKey=${JSON.stringify(keyC)}`;
        return (await count(ns, query)) === 1 ? true : undefined;
      },
      'the continued run of C to be indexed',
      SETTLE_MS,
    );
    expect(((await handleC.query(statusQuery)) as ReconcileStatus).runs).toBeGreaterThan(
      runsBefore,
    );
    const eventsC = await allEvents(ns, keyC);
    expect(failedTasks(eventsC)).toEqual([]);
    expect(
      eventsC.filter(
        (event) => event.workflowExecutionSignaledEventAttributes?.signalName === 'recheck',
      ),
    ).toEqual([]);
    expect(await attributesOf(ns, keyC)).toEqual({
      SideEffectKey: [keyC],
      SideEffectResource: [bankB],
      SideEffectState: ['waiting'],
    });
    // The next run inherits them and asks no more.
    const runsIndexed = ((await handleC.query(statusQuery)) as ReconcileStatus).runs ?? 0;
    await waitFor(
      async () => {
        await poke();
        const status = (await handleC.query(statusQuery)) as ReconcileStatus;
        return (status.runs ?? 0) > runsIndexed ? true : undefined;
      },
      'C to continue as new once more',
      SETTLE_MS,
    );
    const { runId } = await handleC.describe();
    const latest = await ns.client.workflow.getHandle(handleC.workflowId, runId).fetchHistory();
    const started = latest.events?.[0]?.workflowExecutionStartedEventAttributes;
    expect(started?.continuedExecutionRunId).toBeTruthy();
    expect(registrationAsks(latest.events ?? [])).toEqual([]);
    expect(await attributesOf(ns, keyC)).toMatchObject({ SideEffectState: ['waiting'] });

    // docs/production.md's `recheck` to every open reconcile: the waiting query finds them all.
    const recheckAll = documentedRecheck().replace('<ns>', ns.name);
    let sent = 0;
    await waitFor(
      async () => {
        // Again every few seconds, until the worker's cached answer (up to 10 s old) caught up.
        if (Date.now() - sent > 5_000) {
          sent = Date.now();
          await runShell(recheckAll);
        }
        return (await count(ns, waitingQuery(bankA))) === onA.length &&
          (await count(ns, waitingQuery(bankB))) === onB.length + 1
          ? true
          : undefined;
      },
      'the waiting query to find every reconcile',
      SETTLE_MS,
    );
    for (const key of onA)
      expect(await attributesOf(ns, key), key).toEqual({
        SideEffectKey: [key],
        SideEffectResource: [bankA],
        SideEffectState: ['waiting'],
      });

    // A reminder alone (no recheck, no continue-as-new) indexes D, a memo-only run reminding every 2 s.
    const keyD = `${ns.name}-D/charge`;
    await memoOnlyReconcile(ns, keyD, bankB, { remindEveryMs: 2_000 });
    await waitFor(
      async () =>
        (await count(ns, `${waitingQuery(bankB)} AND SideEffectKey=${JSON.stringify(keyD)}`)) === 1
          ? true
          : undefined,
      'the reminder of D to index it',
      SETTLE_MS,
    );
    const eventsD = await allEvents(ns, keyD);
    expect(failedTasks(eventsD)).toEqual([]);
    expect(
      eventsD.filter((event) => event.workflowExecutionSignaledEventAttributes != null),
    ).toEqual([]);
    expect(
      eventsD.filter((event) => event.workflowExecutionContinuedAsNewEventAttributes != null),
    ).toEqual([]);

    // Opened now, E is indexed from its start by the starter: its run never asks.
    const [keyE] = await openReconciles(ns, bankB, 1, 'E');
    expect(await attributesOf(ns, keyE!)).toEqual({
      SideEffectKey: [keyE],
      SideEffectResource: [bankB],
      SideEffectState: ['waiting'],
    });
    expect(registrationAsks(await allEvents(ns, keyE!))).toEqual([]);
    const onBNow = [...onB, keyC, keyD, keyE!];

    // Temporal's batch signal over the waiting query decides every key on A ("any attempt": one
    // verdict cannot name each key's).
    const verdict = { applied: false, reason: 'bank export: no such charge', by: 'ops-batch' };
    await runTemporal(ns.name, [
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
    for (const key of onA) {
      const resolution = (await handleOf(ns, key).result()) as ReconcileResolution;
      expect(resolution).toEqual({ key, ...verdict, decidedBy: 'signal' });
      expect((await store.inspect(key))?.state).toBe('free');
      // SideEffectState followed the verdict, as it does on a reconcile indexed from the start.
      expect(await attributesOf(ns, key), key).toMatchObject({ SideEffectState: ['resolved'] });
    }

    // `sideeffect resolve --resource` decides B's keys (C, D, E included) through their workflows.
    const cli = await runCli(
      [
        'resolve',
        '--resource',
        bankB,
        '--any-attempt',
        '--not-applied',
        '--reason',
        'bank export: no such charge',
        '--json',
      ],
      {
        DATABASE_URL: databaseUrl(),
        SIDEEFFECT_SCHEMA: db.schema,
        TEMPORAL_ADDRESS,
        TEMPORAL_NAMESPACE: ns.name,
      },
    );
    expect(cli.code, cli.stderr).toBe(0);
    expect(JSON.parse(cli.stdout).decided.sort()).toEqual([...onBNow].sort());
    for (const key of onBNow) {
      const resolution = (await handleOf(ns, key).result()) as ReconcileResolution;
      expect(resolution).toMatchObject({ key, applied: false, decidedBy: 'update' });
      expect(await attributesOf(ns, key), key).toMatchObject({ SideEffectState: ['resolved'] });
    }
    await waitFor(
      async () =>
        (await count(ns, keysQuery([...onA, ...onBNow]).replace('Running', 'Completed'))) ===
        onA.length + onBNow.length
          ? true
          : undefined,
      'every reconcile to show as completed',
      SETTLE_MS,
    );

    // Every run's history replays against the current code.
    const workflowBundle = await testBundle();
    for (const key of [...onA, ...onBNow]) {
      for await (const run of ns.client.workflow.list({
        query: `WorkflowId=${JSON.stringify(reconcileWorkflowId(key))}`,
      })) {
        const history = await ns.client.workflow
          .getHandle(run.workflowId, run.runId)
          .fetchHistory();
        await Worker.runReplayHistory({ workflowBundle }, history, run.workflowId);
      }
    }
  }, 480_000);
});

describe('search attributes never registered', () => {
  let ns: Namespace;

  beforeAll(async () => {
    ns = await namespaceWithWorker('never-sa');
  }, 120_000);

  afterAll(async () => {
    await ns?.close();
  });

  it('reconciles keep asking without a failed workflow task, and resolve', async () => {
    const [key] = await openReconciles(ns, `card:${ns.name}`, 1);
    const handle = handleOf(ns, key!);
    await recheckUntil(
      ns,
      [key!],
      async () => (registrationAsks(await allEvents(ns, key!)).length >= 3 ? true : undefined),
      'three asks',
    );
    const events = await allEvents(ns, key!);
    expect(failedTasks(events)).toEqual([]);
    expect(
      events.filter((event) => event.activityTaskCompletedEventAttributes != null).length,
    ).toBeGreaterThanOrEqual(3);
    expect(await attributesOf(ns, key!)).toEqual({});
    expect(((await handle.query(statusQuery)) as ReconcileStatus).state).toBe('waiting');

    await handle.signal(resolveSignal, {
      applied: false,
      reason: 'bank export: no such charge',
      by: 'ops',
      attempt: 'any',
    });
    expect(await handle.result()).toMatchObject({ key, applied: false, decidedBy: 'signal' });
    expect(failedTasks(await allEvents(ns, key!))).toEqual([]);
    expect(await attributesOf(ns, key!)).toEqual({});
  }, 240_000);
});

/** The `recheck` batch docs/production.md prints after registration, as written there (with `<ns>`). */
function documentedRecheck(): string {
  const text = readFileSync(path.join(REPO_ROOT, 'docs/production.md'), 'utf8');
  const line = text
    .split('\n')
    .find((candidate) => /^temporal workflow signal .*--name recheck/.test(candidate.trim()));
  if (!line) throw new Error('docs/production.md prints no recheck batch');
  return line.trim();
}

/** A printed `temporal ...` line, quotes and all, through a shell, against the dev server. */
async function runShell(command: string): Promise<void> {
  const cli = `'${temporalCliPath()}'`;
  await promisify(execFile)('bash', [
    '-c',
    `${command.replace(/^temporal /, `${cli} `)} --address ${TEMPORAL_ADDRESS}`,
  ]);
}

/** The real `temporal` CLI on `namespace`. */
async function runTemporal(namespace: string, args: string[]): Promise<string> {
  const { stdout } = await promisify(execFile)(temporalCliPath(), [
    ...args,
    '--address',
    TEMPORAL_ADDRESS,
    '--namespace',
    namespace,
  ]);
  return stdout;
}
