/**
 * A worker process SIGKILLed in the middle of apply, after the downstream took the write: on real
 * Postgres (PgStore + PgFencedSink) and the dev server. The key must become uncertain (never
 * blindly re-applied), be reconciled, and the ledger must never show two writes.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSideEffectActivities } from '../../src/activities/index.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import type { SideEffectOutcome } from '../../src/workflows/index.js';
import { type FreshSchema, freshSchema } from '../support/postgres.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE } from '../support/temporal.js';
import { type Harness, startHarness } from './harness.js';
import { LEDGER_DDL, pgEffects } from './pg-effects.js';

const CRASH_WORKER = fileURLToPath(new URL('./crash-worker.ts', import.meta.url));
const TTL_MS = 2_000;

/** Resolves with the first stdout line of `child` that starts with `prefix`. */
function lineFrom(child: ChildProcess, prefix: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      if (line.startsWith(prefix)) {
        lines.close();
        resolve(line);
      }
    });
    child.once('exit', (code, signal) =>
      reject(new Error(`crash worker exited (${code ?? signal}) before "${prefix}"`)),
    );
  });
}

describe('a worker killed mid-apply', () => {
  let db: FreshSchema;
  let h: Harness;
  let child: ChildProcess | undefined;
  let store: PgStore;

  beforeAll(async () => {
    db = await freshSchema('crash');
    await migrate(db.pool, { schema: db.schema });
    await db.pool.query(LEDGER_DDL);
    store = new PgStore({ pool: db.pool, schema: db.schema });
    // The sweeper is on: whichever comes first, the sweep or the retry's acquire, finds the dead lease.
    h = await startHarness('crash', {
      store,
      effects: pgEffects({ pool: db.pool, schema: db.schema }),
      ttlMs: TTL_MS,
      sweepEveryMs: 500,
    });
  });
  afterAll(async () => {
    child?.kill('SIGKILL');
    await h?.close();
    await db?.drop();
  });

  it('leaves the key uncertain, reconciles it by probe, and the ledger shows one write', async () => {
    const applyQueue = `${h.taskQueue}-apply`;
    child = spawn(process.execPath, ['--import', 'tsx', CRASH_WORKER], {
      env: {
        ...process.env,
        SCHEMA: db.schema,
        TASK_QUEUE: applyQueue,
        RECONCILE_QUEUE: h.taskQueue,
        TTL_MS: String(TTL_MS),
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => child!.once('exit', resolve));
    await lineFrom(child, 'READY');

    const handle = await h.start('guarded', [
      'deposit',
      { account: 'c1', amount: 5 },
      {
        taskQueue: applyQueue,
        heartbeatTimeout: '2 seconds',
        retry: { initialInterval: '200 ms' },
      },
    ]);
    const key = `${handle.workflowId}/deposit`;
    expect(await lineFrom(child, 'WROTE')).toBe(`WROTE ${key}`);
    expect((await store.inspect(key))?.state).toBe('applying');
    child.kill('SIGKILL');
    await exited;

    // A restarted worker takes the retries on the apply queue.
    const native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
    const survivor = await Worker.create({
      connection: native,
      namespace: TEMPORAL_NAMESPACE,
      taskQueue: applyQueue,
      activities: createSideEffectActivities({
        store,
        effects: pgEffects({ pool: db.pool, schema: db.schema }),
        ttlMs: TTL_MS,
        client: h.client,
        taskQueue: h.taskQueue,
      }),
    });
    const outcome = (await survivor.runUntil(handle.result())) as SideEffectOutcome<{
      entry: number;
    }>;
    await native.close();

    const { rows } = await db.pool.query<{ id: number }>('select id from ledger where key = $1', [
      key,
    ]);
    expect(rows).toHaveLength(1);
    expect(outcome).toEqual({ outcome: 'reconciled', result: { entry: rows[0]!.id }, key });
    expect((await store.inspect(key))?.state).toBe('done');
    const transitions = (await store.events(key)).map((event) => `${event.from}->${event.to}`);
    expect(transitions).toEqual(['free->applying', 'applying->uncertain', 'uncertain->done']);
    expect(((await h.reconcile(key).result()) as ReconcileResolution).decidedBy).toBe('probe');
  });

  it('replays every recorded history without nondeterminism', async () => {
    expect(await h.replayAll()).toEqual([]);
  });
});
