/**
 * An app that encrypts its payloads (an AES-GCM codec on the Worker's data converter): the
 * plugin, given no client, starts and signals ReconcileWorkflows through that converter, so the
 * server stores them encrypted; the CLI reads and resolves them with `--data-converter`; a
 * plugin client without the codec is refused at Worker.create.
 */
import { fileURLToPath } from 'node:url';
import {
  Client,
  Connection,
  type WorkflowHandle,
  WorkflowUpdateFailedError,
} from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { InvalidActionError } from '../../src/core/errors.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { encodedFailureConverterPath, SideEffectPlugin } from '../../src/worker/index.js';
import {
  reconcileWorkflowId,
  resolveUpdate,
  type SideEffectOutcome,
  statusQuery,
} from '../../src/workflows/index.js';
import { runCli } from '../support/cli.js';
import { dataConverter, ENCRYPTED } from '../support/encryption-codec.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { testBundle, WORKFLOWS_PATH, waitFor } from './harness.js';

const CONVERTER_MODULE = fileURLToPath(new URL('../support/encryption-codec.ts', import.meta.url));
const CARD = '4111111111111111';

let native: NativeConnection;
let connection: Connection;
let db: FreshSchema;

beforeAll(async () => {
  [native, connection, db] = await Promise.all([
    NativeConnection.connect({ address: TEMPORAL_ADDRESS }),
    Connection.connect({ address: TEMPORAL_ADDRESS }),
    freshSchema('codec'),
  ]);
  await migrate(db.pool, { schema: db.schema });
});

afterAll(async () => {
  await connection?.close();
  await native?.close();
  await db?.drop();
});

const lost = defineEffect({
  resource: () => 'codec-account',
  async apply() {
    throw new Error('connection reset after the charge');
  },
});

/** Fails as an uncertain apply, saying what a gateway says: the card it was given. */
const leaky = defineEffect({
  resource: () => 'codec-leaky',
  // Answers no reason of its own: the refusal then describes the result, without quoting it.
  result: (result: unknown) =>
    typeof (result as { chargeId?: unknown } | null)?.chargeId === 'number',
  async apply(input: { card: string; cents: number }): Promise<{ chargeId: number }> {
    throw new Error(`gateway timeout charging card ${input.card}: insufficient funds?`);
  },
});

/** The history as text, payload bytes included, to search for plain text anywhere in it. */
function asText(events: unknown): string {
  return JSON.stringify(events, (_, value) =>
    value instanceof Uint8Array ? Buffer.from(value).toString('latin1') : value,
  );
}

type Event = NonNullable<Awaited<ReturnType<WorkflowHandle['fetchHistory']>>['events']>[number];
type StoredPayload = NonNullable<
  NonNullable<NonNullable<Event['workflowExecutionStartedEventAttributes']>['input']>['payloads']
>[number];

function encodingOf(payload: StoredPayload | null | undefined): string {
  return new TextDecoder().decode(payload?.metadata?.encoding ?? new Uint8Array());
}

/** Every payload of the history, as stored by the server. */
function payloadsOf(events: Event[]): StoredPayload[] {
  return events.flatMap((event) => [
    ...(event.workflowExecutionStartedEventAttributes?.input?.payloads ?? []),
    ...(event.workflowExecutionSignaledEventAttributes?.input?.payloads ?? []),
    ...(event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.args
      ?.payloads ?? []),
    ...(event.activityTaskScheduledEventAttributes?.input?.payloads ?? []),
    ...(event.workflowExecutionCompletedEventAttributes?.result?.payloads ?? []),
  ]);
}

describe('a Worker with an encryption codec', () => {
  it('stores what the library sends encrypted, and the CLI resolves through --data-converter', async () => {
    const taskQueue = uniqueTaskQueue('codec');
    const store = new PgStore({ pool: db.pool, schema: db.schema });
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
    const env = {
      DATABASE_URL: databaseUrl(),
      SIDEEFFECT_SCHEMA: db.schema,
      TEMPORAL_ADDRESS,
      TEMPORAL_NAMESPACE,
    };
    await worker.runUntil(async () => {
      const order = await app.workflow.start('guarded', {
        taskQueue,
        workflowId,
        args: ['lost', { card: CARD, cents: 500 }],
      });
      const reconcile = app.workflow.getHandle(reconcileWorkflowId(key));
      await waitFor(
        async () =>
          (await reconcile.query(statusQuery).catch(() => undefined))?.subscribers.length === 1 ||
          undefined,
        'the order to subscribe to its reconcile',
      );

      const waiting = (await raw.workflow.getHandle(reconcileWorkflowId(key)).fetchHistory())
        .events!;
      const started = waiting[0]!.workflowExecutionStartedEventAttributes!;
      expect(encodingOf(started.input!.payloads![0])).toBe(ENCRYPTED);
      const subscribe = waiting.find(
        (event) => event.workflowExecutionSignaledEventAttributes?.signalName === 'subscribe',
      );
      expect(
        encodingOf(subscribe?.workflowExecutionSignaledEventAttributes?.input?.payloads?.[0]),
      ).toBe(ENCRYPTED);
      const stored = payloadsOf(waiting);
      expect(stored.length).toBeGreaterThan(1);
      expect(stored.map(encodingOf)).toEqual(stored.map(() => ENCRYPTED));
      expect(JSON.stringify(waiting)).not.toContain(CARD);

      // Without the converter the CLI cannot read the reconcile and decides nothing.
      const blind = await runCli(
        [
          'resolve',
          '--any-attempt',
          key,
          '--applied',
          '--result',
          '"charged"',
          '--reason',
          'seen at the bank',
        ],
        env,
      );
      // A configuration to fix (exit 2), said as such: not "unreachable" (exit 3).
      expect(blind.code, blind.stderr).toBe(2);
      expect(blind.stderr).toContain(`encoded as ${ENCRYPTED}`);
      expect(blind.stderr).toContain('--data-converter MODULE');
      expect((await store.inspect(key))?.state).toBe('uncertain');

      const cli = await runCli(
        [
          'resolve',
          '--any-attempt',
          key,
          '--applied',
          '--result',
          '"charged"',
          '--reason',
          'seen at the bank',
          '--data-converter',
          CONVERTER_MODULE,
          '--json',
        ],
        env,
      );
      expect(cli.code, cli.stderr).toBe(0);
      expect(JSON.parse(cli.stdout)).toMatchObject({
        won: true,
        via: 'workflow',
        applied: true,
        result: 'charged',
      });
      expect((await order.result()) as SideEffectOutcome<unknown>).toEqual({
        outcome: 'reconciled',
        result: 'charged',
        key,
      });
      const decided = (await raw.workflow.getHandle(reconcileWorkflowId(key)).fetchHistory())
        .events!;
      const update = payloadsOf(decided).filter((payload) => !stored.includes(payload));
      expect(update.map(encodingOf)).toEqual(update.map(() => ENCRYPTED));
      expect(decided.some((event) => event.workflowExecutionUpdateAcceptedEventAttributes)).toBe(
        true,
      );
    });
    expect((await store.inspect(key))?.state).toBe('done');
  });

  it('keeps apply error texts and refused verdicts out of the history in plain text', async () => {
    const taskQueue = uniqueTaskQueue('codec-failures');
    const store = new PgStore({ pool: db.pool, schema: db.schema });
    const worker = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue,
      // Bundled by the Worker, so the workflow sandbox gets the plugin's failure converter too.
      workflowsPath: WORKFLOWS_PATH,
      dataConverter,
      plugins: [new SideEffectPlugin({ store, effects: { leaky }, ttlMs: 2_000, sweepEveryMs: 0 })],
    });
    const app = new Client({ connection, namespace: TEMPORAL_NAMESPACE, dataConverter });
    const raw = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
    const workflowId = `${taskQueue}-order`;
    const key = `${workflowId}/leaky`;
    await worker.runUntil(async () => {
      const order = await app.workflow.start('guarded', {
        taskQueue,
        workflowId,
        args: ['leaky', { card: CARD, cents: 500 }],
      });
      const reconcile = app.workflow.getHandle(reconcileWorkflowId(key));
      await waitFor(
        async () =>
          (await reconcile.query(statusQuery).catch(() => undefined))?.state === 'waiting' ||
          undefined,
        'the reconcile to wait',
      );
      // A verdict the effect's check refuses, with the card in its result.
      await expect(
        reconcile.executeUpdate(resolveUpdate, {
          args: [
            { applied: true, result: { card: CARD }, reason: 'seen', by: 'ops', attempt: 'any' },
          ],
        }),
      ).rejects.toThrow(WorkflowUpdateFailedError);
      const { rejected } = await reconcile.query(statusQuery);
      expect(rejected.map((entry) => entry.error)).toEqual([
        expect.stringMatching(/an object with field\(s\) card does not pass/),
      ]);
      await reconcile.executeUpdate(resolveUpdate, {
        args: [
          { applied: true, result: { chargeId: 7 }, reason: 'seen', by: 'ops', attempt: 'any' },
        ],
      });
      expect(await order.result()).toMatchObject({ result: { chargeId: 7 } });

      const caller = (await raw.workflow.getHandle(workflowId).fetchHistory()).events!;
      const failed = caller.find((event) => event.activityTaskFailedEventAttributes)!
        .activityTaskFailedEventAttributes!.failure!;
      expect(failed.message).toBe('Encoded failure');
      expect(failed.stackTrace).toBe('');
      expect(encodingOf(failed.encodedAttributes)).toBe(ENCRYPTED);
      // Moved, not lost: the app's codec reads the message back.
      const [decoded] = await dataConverter.payloadCodecs![0]!.decode([failed.encodedAttributes!]);
      expect(Buffer.from(decoded!.data!).toString()).toContain('insufficient funds');
      const decided = (await raw.workflow.getHandle(reconcileWorkflowId(key)).fetchHistory())
        .events!;
      for (const history of [caller, decided]) {
        expect(asText(history)).not.toContain(CARD);
        expect(asText(history)).not.toContain('insufficient funds');
      }
    });
  });

  it('warns at Worker.create when a bundle built without the encoding failure converter runs under a codec', async () => {
    const warn = vi.spyOn(Runtime.instance().logger, 'warn');
    const create = async (workflowBundle: { code: string }) => {
      const worker = await Worker.create({
        connection: native,
        namespace: TEMPORAL_NAMESPACE,
        taskQueue: uniqueTaskQueue('codec-bundle'),
        workflowBundle,
        dataConverter,
        plugins: [
          new SideEffectPlugin({
            store: new PgStore({ pool: db.pool, schema: db.schema }),
            effects: { lost },
            ttlMs: 2_000,
            sweepEveryMs: 0,
          }),
        ],
      });
      await worker.runUntil(async () => {});
    };
    const plainTexts = expect.stringContaining('reach the history in plain text');
    try {
      // Built ahead of time without the plugin's failure converter.
      await create(await testBundle());
      expect(warn).toHaveBeenCalledWith(plainTexts, expect.anything());
      warn.mockClear();
      await create(
        await bundleWorkflowCode({
          workflowsPath: WORKFLOWS_PATH,
          failureConverterPath: encodedFailureConverterPath,
        }),
      );
      expect(warn).not.toHaveBeenCalledWith(plainTexts, expect.anything());
    } finally {
      warn.mockRestore();
    }
  }, 180_000);

  it('refuses a plugin client without the codec at Worker.create', async () => {
    const plain = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
    const refused = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue: uniqueTaskQueue('codec-refused'),
      workflowBundle: { code: '' },
      dataConverter,
      plugins: [
        new SideEffectPlugin({
          store: new PgStore({ pool: db.pool, schema: db.schema }),
          effects: { lost },
          ttlMs: 2_000,
          client: plain,
        }),
      ],
    }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(InvalidActionError);
    expect((refused as Error).message).toMatch(/dataConverter/);
  });
});
