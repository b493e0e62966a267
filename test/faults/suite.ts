/**
 * What the fault files share: one Cluster per file (three worker processes on one task queue,
 * PgStore and PgFencedSink on a fresh schema, their own Temporal dev server and a cuttable proxy
 * in front of Postgres), and `scenario()`, which runs one scenario and asserts what must hold
 * whatever the faults.
 */
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { afterAll, beforeAll, expect } from 'vitest';
import { Cluster } from './cluster.js';
import { formatTable, type Report, runScenario, type ScenarioOptions } from './scenario.js';

export const TTL_MS = 1_500;
const log = (line: string) => process.stdout.write(`${line}\n`);

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

/** Starts the file's Cluster before its tests and stops it after; returns the scenario runner. */
export function faultSuite(): (
  options: Partial<ScenarioOptions> & Pick<ScenarioOptions, 'name' | 'faults'>,
) => Promise<Report> {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
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

  return async (options) => {
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
  };
}

/** How many faults of these kinds the scenario injected. */
export const injected = (report: Report, ...kinds: string[]) =>
  kinds.reduce((sum, kind) => sum + (report.faults[kind] ?? 0), 0);
