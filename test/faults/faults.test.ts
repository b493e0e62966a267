/**
 * The fault-injection harness (issue 7): three worker processes on one task queue, PgStore and
 * PgFencedSink on a fresh schema, our own Temporal dev server and a cuttable proxy in front of
 * Postgres. Each scenario drives many small workflows of guarded effects through one kind of
 * fault, then a last one through all of them at once; the checker judges each run from the ledger
 * and the store alone. Zero duplicates, zero stale writes landed, zero stuck keys, every workflow
 * finished. `npm run soak -- --minutes N` runs the mixed scenario at scale.
 */
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cluster } from './cluster.js';
import {
  FAULT_KINDS,
  formatTable,
  type Report,
  runScenario,
  type ScenarioOptions,
} from './scenario.js';

Runtime.install({ logger: new DefaultLogger('ERROR') });

const TTL_MS = 1_500;
const log = (line: string) => process.stdout.write(`${line}\n`);

let cluster: Cluster;
const reports: Report[] = [];

beforeAll(async () => {
  cluster = await Cluster.start({
    workers: 3,
    ttlMs: TTL_MS,
    sweepEveryMs: 1_000,
    fencedProbe: true,
    log,
  });
});

afterAll(async () => {
  if (reports.length > 0) log(`\nfault harness\n${formatTable(reports)}\n`);
  // After a failure the worker and server logs stay for a look (the path is printed).
  const failed = reports.some((report) => report.problems.length > 0);
  await cluster?.close({ keepFiles: failed });
});

const base: Omit<ScenarioOptions, 'name' | 'faults'> = {
  workflows: 20,
  concurrency: 8,
  resources: 3,
  maxFaults: 6,
  faultGapMs: [700, 1_500],
  loseResponse: 0.05,
  drainTimeoutMs: 90_000,
  log,
};

async function scenario(
  options: Partial<ScenarioOptions> & Pick<ScenarioOptions, 'name' | 'faults'>,
) {
  const report = await runScenario(cluster, { ...base, ...options });
  reports.push(report);
  log(formatTable([report]));
  for (const problem of report.problems.slice(0, 20)) log(`  problem: ${problem}`);
  // What must hold whatever the faults: every workflow finished, nothing applied twice, no late
  // write landed, nothing left claiming a lease, results are what the downstream recorded, and
  // every key that was ever uncertain went through a ReconcileWorkflow.
  expect(report.failed).toEqual([]);
  expect(report.completed).toBe(report.workflows);
  expect(report.duplicates).toBe(0);
  expect(report.staleLanded).toBe(0);
  expect(report.stuck).toBe(0);
  expect(report.resultMismatches).toBe(0);
  expect(report.writtenNotDone).toBe(0);
  expect(report.missingReconcile).toBe(0);
  expect(report.stillUncertain).toBe(0);
  expect(report.applied + report.replayed + report.reconciled).toBe(report.actions);
  return report;
}

const injected = (report: Report, ...kinds: string[]) =>
  kinds.reduce((sum, kind) => sum + (report.faults[kind] ?? 0), 0);

describe('fault injection: no duplicate side effects', () => {
  it('workers SIGKILLed at random, mid-apply and right after the downstream write, then restarted', async () => {
    const report = await scenario({
      name: 'kill',
      faults: ['kill', 'kill-mid-apply', 'kill-after-write'],
      delayMs: [100, 400],
    });
    expect(injected(report, 'kill-mid-apply', 'kill-after-write')).toBeGreaterThan(0);
    // A worker that died holding `applying` leaves the key uncertain, never blindly re-applied.
    expect(report.uncertain).toBeGreaterThan(0);
  }, 180_000);

  it('a worker paused past its lease while another takes over: its late write is refused', async () => {
    const report = await scenario({
      name: 'pause',
      faults: ['pause'],
      // Long enough that the pause lands before the write, not after it.
      delayMs: [250, 500],
      // Well past the heartbeat timeout and the reconcile that follows the takeover.
      pauseMs: [2 * TTL_MS + 3_000, 2 * TTL_MS + 4_000],
    });
    expect(injected(report, 'pause')).toBeGreaterThan(0);
    expect(report.staleRejected).toBeGreaterThan(0);
  }, 180_000);

  it('Postgres backends terminated mid-operation and Postgres unreachable for seconds', async () => {
    const report = await scenario({ name: 'postgres', faults: ['pg-terminate', 'pg-cut'] });
    expect(injected(report, 'pg-terminate')).toBeGreaterThan(0);
    expect(injected(report, 'pg-cut')).toBeGreaterThan(0);
  }, 180_000);

  it('the Temporal server stopped and restarted while workflows run', async () => {
    const report = await scenario({
      name: 'temporal',
      faults: ['temporal-restart'],
      faultGapMs: [1_000, 2_000],
    });
    expect(injected(report, 'temporal-restart')).toBeGreaterThan(0);
  }, 180_000);

  it('the downstream takes the write but the response is lost', async () => {
    const report = await scenario({ name: 'lost', faults: [], loseResponse: 0.5 });
    expect(injected(report, 'lost-response')).toBeGreaterThan(0);
    expect(report.uncertain).toBeGreaterThan(0);
    expect(report.byProbe + report.bySignal).toBeGreaterThanOrEqual(report.uncertain);
  }, 180_000);

  it('every fault at once', async () => {
    const report = await scenario({
      name: 'mixed',
      faults: FAULT_KINDS,
      workflows: 30,
      resources: 4,
      maxFaults: 10,
      loseResponse: 0.1,
    });
    expect(Object.keys(report.faults).length).toBeGreaterThan(2);
  }, 240_000);
});
