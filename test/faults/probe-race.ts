/**
 * The race behind the harness's fenced probe (effects.ts `readLedger`): an uncertain key resolved
 * "not applied" from a plain read of the downstream is applied twice when the holder that lost its
 * lease is merely paused, not dead. Only the public API (PgStore, PgFencedSink) on a fresh schema;
 * deterministic, no Temporal.
 *
 *   npx tsx test/faults/probe-race.ts            plain read: the late write lands, 2 rows, one key
 *   npx tsx test/faults/probe-race.ts --fenced   fenced read: the late write is refused, 1 row
 */
import { fileURLToPath } from 'node:url';
import { FenceStaleError } from '../../src/core/errors.js';
import {
  migrate,
  PgFencedSink,
  PgStore,
  type PgStoreOptions,
} from '../../src/store/postgres/index.js';
import { freshSchema } from '../support/postgres.js';
import { LEDGER_DDL, readLedger, verdictFromLedger } from './effects.js';

export interface ProbeRace {
  steps: string[];
  lateWrite: 'accepted' | 'refused';
  ledger: Array<{ seq: number; fence: number; writer: number }>;
}

export async function probeRace(
  fenced: boolean,
  batching: PgStoreOptions['batching'] = true,
): Promise<ProbeRace> {
  const steps: string[] = [];
  const db = await freshSchema('probe_race');
  const store = new PgStore({ pool: db.pool, schema: db.schema, batching });
  const sink = new PgFencedSink({ pool: db.pool, schema: db.schema });
  try {
    await migrate(db.pool, { schema: db.schema });
    await db.pool.query(LEDGER_DDL);
    const action = { key: 'order-1/charge', resource: 'card-1' };
    const write = (fence: number, writer: number) =>
      sink.writeFenced(action.resource, fence, (tx) =>
        tx.query(
          `insert into ledger (key, resource, fence, writer, value, safe)
           values ($1, $2, $3, $4, 500, false)`,
          [action.key, action.resource, fence, writer],
        ),
      );

    // 1. Worker A is granted the key and starts applying, then pauses (GC, SIGSTOP) before writing.
    const a = await store.acquire(action, 300, { applying: true });
    if (a.outcome !== 'granted') throw new Error(`A: ${a.outcome}`);
    await new Promise((resolve) => setTimeout(resolve, 500)); // A's lease runs out meanwhile
    // 2. The activity is retried on worker B: the key is uncertain ("lease lost during apply").
    const b1 = await store.acquire(action, 10_000, { applying: true });
    steps.push(`B's retry: ${b1.outcome}`);
    // 3. The probe (or an operator) reads the downstream: nothing there, so "not applied".
    const verdict = verdictFromLedger(
      await readLedger(db.pool, sink, store, action.key, action.resource, fenced),
    );
    steps.push(`probe (${fenced ? 'fenced' : 'plain'} read): applied=${verdict.applied}`);
    await store.resolveUncertain(action.key, { applied: verdict.applied, reason: 'probe' });
    // 4. A resumes and makes the write it was about to make, with its old fence.
    let lateWrite: ProbeRace['lateWrite'] = 'accepted';
    try {
      await write(a.lease.fence, 1);
    } catch (error) {
      if (!(error instanceof FenceStaleError)) throw error;
      lateWrite = 'refused';
    }
    steps.push(`A's late write with fence ${a.lease.fence}: ${lateWrite}`);
    // 5. The workflow re-runs the effect, as told: B is granted a newer fence and writes.
    const b2 = await store.acquire(action, 10_000, { applying: true });
    if (b2.outcome !== 'granted') throw new Error(`B: ${b2.outcome}`);
    await write(b2.lease.fence, 2);
    await store.complete(action, b2.lease, { payload: new TextEncoder().encode('{}') });
    steps.push(`B's re-run with fence ${b2.lease.fence}: written, completed`);
    const { rows } = await db.pool.query<{ seq: number; fence: number; writer: number }>(
      'select seq::int, fence::int, writer from ledger order by seq',
    );
    return { steps, lateWrite, ledger: rows };
  } finally {
    await db.drop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const race = await probeRace(process.argv.includes('--fenced'));
  for (const step of race.steps) console.log(step);
  console.table(race.ledger);
  console.log(
    race.ledger.length > 1
      ? `DUPLICATE: one key applied ${race.ledger.length} times`
      : 'applied once',
  );
}
