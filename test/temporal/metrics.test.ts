/**
 * The library's metrics reach the worker's Prometheus endpoint through Temporal's own metric
 * meter: a worker in a child process (its own Runtime, with `telemetryOptions.metrics.prometheus`)
 * runs guarded calls that end applied, replayed, contended, uncertain and not applied; reconciles
 * are decided by a probe, by `sideeffect resolve` (CLI) and by a signal; the sweeper's backlog
 * gauges rise while keys wait and fall back once they are decided. Scraped over HTTP, as
 * Prometheus would.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Client, Connection, WorkflowFailedError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/store/postgres/index.js';
import { reconcileWorkflowId, resolveSignal } from '../../src/workflows/index.js';
import { runCli } from '../support/cli.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
import { waitFor } from './harness.js';
import {
  alertMetricNames,
  freePort,
  type Sample,
  scrape as scrapeUrl,
  total,
} from './prometheus.js';

const WORKER = fileURLToPath(new URL('./metrics-worker.ts', import.meta.url));

let db: FreshSchema;
let child: ChildProcess | undefined;
let connection: Connection;
let client: Client;
let metricsUrl: string;
const taskQueue = uniqueTaskQueue('metrics');
const started: string[] = [];

/** One scrape of the worker's endpoint. */
function scrape(): Promise<Sample[]> {
  return scrapeUrl(metricsUrl);
}

function start(workflow: string, args: unknown[], id: string) {
  started.push(id);
  return client.workflow.start(workflow, { taskQueue, workflowId: id, args });
}

beforeAll(async () => {
  db = await freshSchema('metrics');
  await migrate(db.pool, { schema: db.schema });
  const port = await freePort();
  metricsUrl = `http://127.0.0.1:${port}/metrics`;
  child = spawn(process.execPath, ['--import', 'tsx', WORKER], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl(),
      SCHEMA: db.schema,
      TASK_QUEUE: taskQueue,
      METRICS_ADDRESS: `127.0.0.1:${port}`,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    child!.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('READY')) resolve();
    });
    child!.once('exit', (code) =>
      reject(new Error(`metrics worker exited (${code}) before READY`)),
    );
  });
  connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  client = new Client({ connection, namespace: TEMPORAL_NAMESPACE });
}, 120_000);

afterAll(async () => {
  for (const id of started) {
    await client?.workflow
      .getHandle(id)
      .terminate('test file finished')
      .catch(() => {});
  }
  if (child && child.exitCode === null) {
    const exited = new Promise((resolve) => child!.once('exit', resolve));
    child.kill('SIGTERM');
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 15_000))]);
    if (child.exitCode === null) child.kill('SIGKILL');
  }
  await connection?.close();
  await db?.drop();
});

describe("metrics on the worker's Prometheus endpoint", () => {
  it('outcomes by effect, reconciles opened and resolved by who decided, time to resolution, backlog gauges', async () => {
    const ours = { taskQueue };
    const before = await scrape();
    expect(total(before, 'sideeffect_outcomes', ours)).toBe(0);

    // applied, then replayed
    const twice = await start('guardedTwice', ['pay', { account: 'm1' }], `${taskQueue}-twice`);
    await twice.result();
    // contended: the second call finds the account held and retries after the lease
    const holder = await start(
      'guarded',
      ['pay', { account: 'm2', delayMs: 1_500 }],
      `${taskQueue}-holder`,
    );
    // Started once the store shows the holder holding the account (a fixed head start did not
    // always let it get there first on a loaded machine).
    await waitFor(async () => {
      const { rows } = await db.pool.query(
        `select 1 from ${db.schema}.resources where resource = 'account:m2' and holder is not null`,
      );
      return rows.length > 0 ? true : undefined;
    }, 'the holder to hold account:m2');
    const second = await start('guarded', ['pay', { account: 'm2' }], `${taskQueue}-second`);
    await Promise.all([holder.result(), second.result()]);
    // not applied: declared safe, failed, nothing recorded
    const declined = await start(
      'guarded',
      ['declined', { account: 'm5' }, { retry: { maximumAttempts: 1 } }],
      `${taskQueue}-declined`,
    );
    await expect(declined.result()).rejects.toBeInstanceOf(WorkflowFailedError);
    // uncertain, decided by the probe
    const probed = await start('guarded', ['probed', { account: 'm6' }], `${taskQueue}-probed`);
    await probed.result();

    // Two uncertain keys wait for a person: the sweeper's gauges rise.
    const viaCli = await start(
      'guarded',
      ['pay', { account: 'm3', failOnce: true }],
      `${taskQueue}-cli`,
    );
    const viaSignal = await start(
      'guarded',
      ['pay', { account: 'm4', failOnce: true }],
      `${taskQueue}-signal`,
    );
    const waiting = await waitFor(
      async () => {
        const samples = await scrape();
        return total(samples, 'sideeffect_uncertain_open') === 2 &&
          total(samples, 'sideeffect_uncertain_oldest_age_seconds') > 0
          ? samples
          : undefined;
      },
      'the backlog gauges to show two waiting keys',
      60_000,
    );
    expect(total(waiting, 'sideeffect_uncertain_oldest_age_seconds')).toBeLessThan(120);

    const cliKey = `${viaCli.workflowId}/pay`;
    const signalKey = `${viaSignal.workflowId}/pay`;
    started.push(reconcileWorkflowId(cliKey), reconcileWorkflowId(signalKey));
    const resolved = await runCli(
      [
        'resolve',
        cliKey,
        '--any-attempt',
        '--not-applied',
        '--reason',
        'not in the bank export',
        '--by',
        'metrics-test',
      ],
      { DATABASE_URL: databaseUrl(), SIDEEFFECT_SCHEMA: db.schema },
    );
    expect(resolved.code, resolved.stderr).toBe(0);
    await waitFor(async () => {
      try {
        // Naming no attempt: refused, and counted.
        await client.workflow.getHandle(reconcileWorkflowId(signalKey)).signal(resolveSignal, {
          applied: false,
          reason: 'not in the bank export',
          by: 'ops',
        });
        return true;
      } catch {
        return undefined;
      }
    }, `reconcile/${signalKey} to take a signal`);
    await client.workflow.getHandle(reconcileWorkflowId(signalKey)).signal(resolveSignal, {
      applied: false,
      reason: 'not in the bank export',
      by: 'ops',
      attempt: 'any',
    });
    await Promise.all([viaCli.result(), viaSignal.result()]);

    // Decided: the gauges fall back, and every counter moved by exactly what happened.
    const after = await waitFor(
      async () => {
        const samples = await scrape();
        return total(samples, 'sideeffect_uncertain_open') === 0 ? samples : undefined;
      },
      'the backlog gauge to fall back to 0',
      60_000,
    );
    const outcome = (effect: string, value: string) =>
      total(after, 'sideeffect_outcomes', { ...ours, effect, outcome: value });
    expect(outcome('pay', 'applied')).toBe(5);
    expect(outcome('pay', 'replayed')).toBe(1);
    expect(outcome('pay', 'contended')).toBeGreaterThanOrEqual(1);
    expect(outcome('pay', 'uncertain')).toBe(2);
    expect(outcome('declined', 'not_applied')).toBe(1);
    expect(outcome('probed', 'uncertain')).toBe(1);

    expect(total(after, 'sideeffect_reconciles_opened', ours)).toBe(3);
    const resolvedBy = (decidedBy: string, verdict: string) =>
      total(after, 'sideeffect_reconciles_resolved', { ...ours, decided_by: decidedBy, verdict });
    expect(resolvedBy('probe', 'applied')).toBe(1);
    expect(resolvedBy('cli', 'not_applied')).toBe(1);
    expect(resolvedBy('signal', 'not_applied')).toBe(1);
    expect(
      total(after, 'sideeffect_verdicts_refused', {
        ...ours,
        refusal: 'no_attempt',
        via: 'signal',
      }),
    ).toBe(1);
    expect(total(after, 'sideeffect_time_to_resolution_seconds_count', ours)).toBe(3);
    expect(total(after, 'sideeffect_time_to_resolution_seconds_sum', ours)).toBeGreaterThan(0);
    expect(total(after, 'sideeffect_uncertain_oldest_age_seconds')).toBe(0);

    // Every series the README's alert expressions name is exported under that name.
    const exported = new Set(after.map((sample) => sample.name));
    const { names } = alertMetricNames();
    expect(names.length).toBeGreaterThan(3);
    expect(names.filter((name) => !exported.has(name))).toEqual([]);
  }, 240_000);
});
