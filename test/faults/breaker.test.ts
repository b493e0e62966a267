/**
 * Breaker lane of the fault harness (issue 42), on real Postgres and the real dev server: a bank
 * that takes charges and then, for a while, takes them and times out (the charge is in its ledger,
 * the answer never comes), under 200 concurrent payments served by two workers on one store.
 * Scaled down from "30 s" to OUTAGE_MS, same shape. `npm test` runs it with a breaker; the long
 * tier (`npm run test:long`) runs it once without one too, and compares:
 *
 * - without it, every charge that meets the outage needs a person (counted; long tier);
 * - with it, at most THRESHOLD + the attempts in flight when it opened (at most every activity
 *   slot of both workers) + one per half-open attempt that ended uncertain (the workers ask the
 *   store for every attempt here: closedCacheMs 0);
 * - after the bank recovers (and a person closes the breaker with the CLI) every payment
 *   completes; the uncertain keys are decided from the bank's ledger, as a person would;
 * - 0 duplicate charges, 0 stale writes landed, and each half-open probe slot let exactly one
 *   new charge reach the bank across both workers;
 * - the breaker paused callers (attempts refused, counted per caller), and each paused caller
 *   waited and was then charged exactly once; every caller whose retry budget the pause spent
 *   waited in its workflow (a timer in its history) instead of failing.
 *
 * Counts only: how long anything took is printed, never asserted.
 */

import type { Context } from '@temporalio/activity';
import type { WorkflowHandle } from '@temporalio/client';
import { Client, Connection } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { NativeConnection, Worker } from '@temporalio/worker';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { SideEffectFailureType } from '../../src/protocol/failures.js';
import { PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { reconcileWorkflowId } from '../../src/workflows/index.js';
import { type PgHarness, pgHarness } from '../store/pg-support/harness.js';
import { runCli } from '../support/cli.js';
import { databaseUrl } from '../support/postgres.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { LONG_TIER } from '../support/tier.js';
import { testBundle } from '../temporal/harness.js';

const PAYMENTS = 200;
/** Charges the bank answers before its outage starts. */
const HEALTHY_CHARGES = 40;
/** The outage: "30 s", scaled down; the bank takes each charge, then hangs up after HANG_MS. */
const OUTAGE_MS = 10_000;
const HANG_MS = 300;
const SLOTS_PER_WORKER = 8;
const WORKERS = 2;
const THRESHOLD = 5;
const BREAKER = {
  group: 'bank',
  threshold: THRESHOLD,
  windowMs: 60_000,
  coolDownMs: 1_000,
  maxCoolDownMs: 4_000,
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Lane {
  /** Keys that were ever uncertain: each needed a person. */
  needingPerson: number;
  duplicates: number;
  staleLanded: number;
  charged: number;
  completed: number;
  /** Per half-open episode, the distinct new charges that reached the bank. */
  halfOpenCharges: number[];
  reopened: number;
  personClosed: boolean;
  chargesByWorker: number[];
  /** Attempts the breaker refused (SideEffectPaused), across both workers. */
  pausedAttempts: number;
  /** Callers (workflows) with at least one refused attempt. */
  pausedCallers: number;
  /** Paused callers whose charge then reached the bank exactly once. */
  pausedThenChargedOnce: number;
  /** Callers whose activity call ended paused (their retry budget spent on refusals). */
  gaveUpPaused: number;
  /** Of those, the ones whose workflow then waited the pause out (a timer) instead of failing. */
  waitedInWorkflow: number;
}

/** One run of the scenario on its own schema and task queue. */
async function runLane(withBreaker: boolean): Promise<Lane> {
  const h: PgHarness = await pgHarness(withBreaker ? 'breaker_on' : 'breaker_off', {
    movableClock: false,
  });
  const { pool: admin, schema } = h.db;
  await admin.query(`create table bank_charges (
    seq bigserial primary key, key text not null, resource text not null, fence bigint not null,
    worker int not null)`);
  const bank = {
    taken: 0,
    outage: 'before' as 'before' | 'on' | 'over',
    halfOpen: new Map<number, Set<string>>(),
  };
  let outageOver: () => void = () => {};
  const recovered = new Promise<void>((resolve) => {
    outageOver = resolve;
  });

  const connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  const client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
  const taskQueue = uniqueTaskQueue(withBreaker ? 'breaker-on' : 'breaker-off');
  const workflowBundle = await testBundle();
  const pools: pg.Pool[] = [];
  const natives: NativeConnection[] = [];
  const workers: Worker[] = [];
  const chargesByWorker = Array.from({ length: WORKERS }, () => 0);
  /** Refused attempts by caller workflow id, seen by an activity interceptor on both workers. */
  const pausedBy = new Map<string, number>();
  const countPaused = (context: Context) => ({
    inbound: {
      async execute(input: unknown, next: (input: never) => Promise<unknown>) {
        try {
          return await next(input as never);
        } catch (error) {
          if (error instanceof ApplicationFailure && error.type === SideEffectFailureType.Paused) {
            const caller = context.info.workflowExecution?.workflowId ?? 'none';
            pausedBy.set(caller, (pausedBy.get(caller) ?? 0) + 1);
          }
          throw error;
        }
      },
    },
  });
  for (let w = 0; w < WORKERS; w++) {
    const pool = new pg.Pool({ ...h.db.config, max: 6 });
    pool.on('error', () => {});
    pools.push(pool);
    const store = new PgStore({ pool, schema });
    const sink = new PgFencedSink({ pool, schema });
    const charge = defineEffect({
      resource: (input: { card: string }) => `card:${input.card}`,
      ...(withBreaker ? { breaker: BREAKER } : {}),
      async apply(input, { key, lease }) {
        const resource = `card:${input.card}`;
        if (withBreaker) {
          // Keyed by the probe's slot (`until`, set at each admission of a half-open attempt):
          // a probe that has not ended within one cool-down hands the slot to the next attempt,
          // by design, so a slow machine may see two slots in one half-open period. Any other
          // attempt applying while half-open would share the current slot's key.
          const { rows } = await admin.query<{ state: string; until: Date }>(
            'select state, until from breakers where grp = $1',
            ['bank'],
          );
          const row = rows[0];
          if (row?.state === 'half-open') {
            const at = row.until.getTime();
            bank.halfOpen.set(at, (bank.halfOpen.get(at) ?? new Set()).add(key));
          }
        }
        // The bank takes the charge...
        await sink.writeFenced(resource, lease.fence, (tx) =>
          tx.query(
            'insert into bank_charges (key, resource, fence, worker) values ($1, $2, $3, $4)',
            [key, resource, lease.fence, w],
          ),
        );
        chargesByWorker[w]! += 1;
        bank.taken += 1;
        if (bank.outage === 'before' && bank.taken >= HEALTHY_CHARGES) {
          bank.outage = 'on';
          setTimeout(() => {
            bank.outage = 'over';
            outageOver();
          }, OUTAGE_MS);
        }
        // ...and during the outage its answer never comes.
        if (bank.outage === 'on') {
          await sleep(HANG_MS);
          throw new Error('bank gateway timed out');
        }
        return { chargeId: `ch_${key}` };
      },
    });
    const native = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
    natives.push(native);
    const plugin = new SideEffectPlugin({
      store,
      effects: { charge },
      ttlMs: 5_000,
      sweepEveryMs: 0,
      client,
      // Every attempt asks the store, so the bound is the issue's: no cached "closed" (the
      // default 100 ms adds at most the other worker's slots; test/core/breaker.test.ts).
      breaker: { closedCacheMs: 0 },
    });
    workers.push(
      await Worker.create({
        connection: native,
        namespace: TEMPORAL_NAMESPACE,
        taskQueue,
        workflowBundle,
        plugins: [plugin],
        interceptors: { activity: [countPaused] },
        maxConcurrentActivityTaskExecutions: SLOTS_PER_WORKER,
      }),
    );
  }
  const running = workers.map((worker) => worker.run());

  const handles: WorkflowHandle[] = [];
  try {
    // 200 payments at once: started together, each waiting for an activity slot.
    handles.push(
      ...(await Promise.all(
        Array.from({ length: PAYMENTS }, (_, i) =>
          client.workflow.start('guarded', {
            taskQueue,
            workflowId: `${taskQueue}-pay-${i}`,
            // One in ten with a retry budget a long pause exhausts: they must still complete.
            // (Few: on a shared database a refused connection takes an attempt too.)
            args: [
              'charge',
              { card: `c${i}` },
              i % 10 === 1 ? { retry: { maximumAttempts: 3, initialInterval: '100ms' } } : {},
            ],
          }),
        ),
      )),
    );

    // The person on call: once the bank is back, closes the breaker by hand, then decides every
    // doubtful key from the bank's ledger until every payment is done.
    let personClosed = false;
    let finished = false;
    const results = Promise.all(handles.map((handle) => handle.result())).finally(() => {
      finished = true;
    });
    await Promise.race([recovered, results]);
    if (withBreaker) {
      const closed = await runCli(
        ['breaker', 'close', 'bank', '--reason', 'gateway back, test charge ok', '--by', 'oncall'],
        { DATABASE_URL: databaseUrl(), SIDEEFFECT_SCHEMA: schema },
      );
      expect(closed, closed.stderr).toMatchObject({ code: 0 });
      personClosed = true;
    }
    const decided = new Set<string>();
    while (!finished) {
      const { rows } = await admin.query<{ key: string; fence: string; charged: boolean }>(
        `select k.key, k.fence, exists (select from bank_charges c where c.key = k.key) as charged
           from keys k where k.state = 'uncertain'`,
      );
      for (const row of rows) {
        const id = `${row.key}@${row.fence}`;
        if (decided.has(id)) continue;
        const verdict = row.charged
          ? { applied: true, result: { chargeId: `ch_${row.key}` } }
          : { applied: false };
        try {
          await client.workflow.getHandle(reconcileWorkflowId(row.key)).signal('resolve', {
            ...verdict,
            reason: row.charged ? 'in the bank ledger' : 'not in the bank ledger',
            by: 'oncall',
            fence: Number(row.fence),
          });
          decided.add(id);
        } catch {
          // Its ReconcileWorkflow has not started yet: next round.
        }
      }
      await Promise.race([results.catch(() => {}), sleep(500)]);
    }
    const completed = (await results).length;

    const ever = await admin.query<{ n: number }>(
      `select count(distinct key)::int as n from events where to_state = 'uncertain'`,
    );
    const duplicates = await admin.query(
      'select key from bank_charges group by key having count(*) > 1',
    );
    const stale = await admin.query(
      `select resource from (
         select resource, fence, max(fence) over (partition by resource order by seq
           rows between unbounded preceding and 1 preceding) as before
         from bank_charges) ordered
       where fence < before`,
    );
    const charged = await admin.query<{ n: number }>(
      'select count(distinct key)::int as n from bank_charges',
    );
    const reopened = withBreaker
      ? (
          await admin.query<{ n: number }>(
            `select count(*)::int as n from breaker_events
              where grp = 'bank' and from_state = 'half-open' and to_state = 'open'`,
          )
        ).rows[0]!.n
      : 0;
    const closedBy = withBreaker
      ? (
          await admin.query<{ actor: string }>(
            `select actor from breaker_events where grp = 'bank' and to_state = 'closed'`,
          )
        ).rows.map((r) => r.actor)
      : [];
    const chargesOf = await admin.query<{ key: string; n: number }>(
      'select key, count(*)::int as n from bank_charges group by key',
    );
    const chargedTimes = new Map(chargesOf.rows.map((row) => [row.key, row.n]));
    let gaveUpPaused = 0;
    let waitedInWorkflow = 0;
    for (const handle of handles) {
      if (!pausedBy.has(handle.workflowId)) continue;
      const events = (await handle.fetchHistory()).events ?? [];
      const pausedAt = events.findIndex(
        (e) =>
          e.activityTaskFailedEventAttributes?.failure?.applicationFailureInfo?.type ===
          SideEffectFailureType.Paused,
      );
      if (pausedAt < 0) continue;
      gaveUpPaused += 1;
      if (events.slice(pausedAt).some((e) => e.timerStartedEventAttributes != null))
        waitedInWorkflow += 1;
    }
    return {
      pausedAttempts: [...pausedBy.values()].reduce((a, b) => a + b, 0),
      pausedCallers: pausedBy.size,
      pausedThenChargedOnce: [...pausedBy.keys()].filter(
        (id) => chargedTimes.get(`${id}/charge`) === 1,
      ).length,
      gaveUpPaused,
      waitedInWorkflow,
      needingPerson: ever.rows[0]!.n,
      duplicates: duplicates.rowCount ?? 0,
      staleLanded: stale.rowCount ?? 0,
      charged: charged.rows[0]!.n,
      completed,
      halfOpenCharges: [...bank.halfOpen.values()].map((keys) => keys.size),
      reopened,
      personClosed: personClosed && closedBy.includes('oncall'),
      chargesByWorker,
    };
  } finally {
    for (const handle of handles) await handle.terminate('lane finished').catch(() => {});
    for (const worker of workers) worker.shutdown();
    await Promise.allSettled(running);
    for (const native of natives) await native.close();
    await connection.close();
    for (const pool of pools) await pool.end();
    await h.close();
  }
}

/** The lane with a breaker, run once for both describes. */
let withBreaker: Lane;

describe('fault injection, a bank that takes charges and times out: the breaker', () => {
  beforeAll(async () => {
    withBreaker = await runLane(true);
    process.stdout.write(`breaker lane: ${JSON.stringify({ withBreaker })}\n`);
  }, 600_000);
  afterAll(() => {});

  it('with it, at most N + the attempts in flight when it opened (+ one per uncertain half-open) need a person', () => {
    expect(withBreaker.needingPerson).toBeGreaterThanOrEqual(THRESHOLD);
    expect(withBreaker.needingPerson).toBeLessThanOrEqual(bound(withBreaker));
  });

  it('it paused callers, and every paused caller waited, then was charged exactly once', () => {
    expect(withBreaker.pausedCallers).toBeGreaterThan(0);
    expect(withBreaker.pausedAttempts).toBeGreaterThanOrEqual(withBreaker.pausedCallers);
    expect(withBreaker.pausedThenChargedOnce).toBe(withBreaker.pausedCallers);
    // A caller whose budget of 3 attempts a pause spent waited in its workflow, none failed.
    expect(withBreaker.waitedInWorkflow).toBe(withBreaker.gaveUpPaused);
    expect(withBreaker.gaveUpPaused).toBeLessThanOrEqual(withBreaker.pausedCallers);
  });

  it('after the bank recovers every payment completes, charged once: 0 duplicates, 0 stale writes', () => {
    expect(withBreaker.completed).toBe(PAYMENTS);
    expect(withBreaker.charged).toBe(PAYMENTS);
    expect(withBreaker.duplicates).toBe(0);
    expect(withBreaker.staleLanded).toBe(0);
  });

  it('two workers share one breaker: each half-open probe slot let exactly one new charge reach the bank', () => {
    expect(withBreaker.chargesByWorker.every((n) => n > 0)).toBe(true);
    expect(withBreaker.halfOpenCharges.length).toBeGreaterThanOrEqual(1);
    for (const charges of withBreaker.halfOpenCharges) expect(charges).toBe(1);
  });

  it("a person's close is recorded, with who", () => {
    expect(withBreaker.personClosed).toBe(true);
  });
});

// The comparison costs a second run of the whole lane (about half of this file's time), so only
// the long tier pays it; `npm test` keeps the bound above.
if (LONG_TIER)
  describe('fault injection, the same bank without a breaker (long tier)', () => {
    let without: Lane;
    beforeAll(async () => {
      without = await runLane(false);
      process.stdout.write(`breaker lane, compared: ${JSON.stringify({ without, withBreaker })}\n`);
    }, 900_000);

    it('without a breaker, every charge that met the outage needs a person: more than the bound', () => {
      expect(without.completed).toBe(PAYMENTS);
      expect(without.charged).toBe(PAYMENTS);
      expect(without.duplicates).toBe(0);
      expect(without.staleLanded).toBe(0);
      expect(without.pausedCallers).toBe(0);
      expect(without.needingPerson).toBeGreaterThan(bound(withBreaker));
      expect(withBreaker.needingPerson).toBeLessThan(without.needingPerson);
    });
  });

/** The stated bound on keys needing a person with the breaker on. */
function bound(lane: Lane): number {
  const inFlightWhenOpened = WORKERS * SLOTS_PER_WORKER;
  return THRESHOLD + inFlightWhenOpened + lane.reopened;
}
