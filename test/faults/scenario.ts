/**
 * One fault scenario on a Cluster: a driver starts many small workflows (each 1-3 guarded calls,
 * some repeating a step so it replays), a fault loop injects the scenario's faults at random
 * moments, an operator loop resolves by signal what the probe cannot tell, and afterwards the
 * checker judges from the ledger and the store alone. Everything a scenario creates (workflow ids,
 * keys, resources) starts with its own prefix, so scenarios on one cluster are judged apart.
 */
import { WorkflowExecutionAlreadyStartedError, WorkflowFailedError } from '@temporalio/client';
import { decodeJson } from '../../src/core/json.js';
import type { SideEffectOutcome } from '../../src/workflows/index.js';
import {
  type ReconcileStatus,
  reconcileWorkflowId,
  resolveSignal,
  statusQuery,
} from '../../src/workflows/index.js';
import type { Cluster, WorkerEvent } from './cluster.js';
import { type PostResult, readLedger, verdictFromLedger } from './effects.js';
import type { CutMode } from './proxy.js';
import type { Call } from './workflows.js';

export const FAULT_KINDS = [
  'kill',
  'kill-mid-apply',
  'kill-after-write',
  'pause',
  'pg-terminate',
  'pg-cut',
  'temporal-restart',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface ScenarioOptions {
  name: string;
  /** Injected at random among these; empty for a run without process faults. */
  faults: readonly FaultKind[];
  /** Total workflows to run; with `durationMs`, new ones keep coming until it is over. */
  workflows?: number;
  durationMs?: number;
  /** Workflows in flight at once. */
  concurrency: number;
  /** Resources the calls spread over (few: contention). */
  resources: number;
  /** At most this many faults (default: no limit); the kinds take turns, in a shuffled order. */
  maxFaults?: number;
  /** Gap between two faults, drawn uniformly in [min, max] ms. */
  faultGapMs: [number, number];
  /** Probability that a call's response is lost after its write. */
  loseResponse: number;
  /** Probability that a call's probe cannot tell (an operator resolves it by signal). */
  probeBlind?: number;
  /** Probability of the `safe` effect. */
  safe?: number;
  /** How long a paused worker stays stopped (default [ttl + 2 s, 2 ttl + 4 s], past the heartbeat timeout). */
  pauseMs?: [number, number];
  /** Range of apply's wait before its write (default [0, 400] ms). */
  delayMs?: [number, number];
  drainTimeoutMs?: number;
  progressEveryMs?: number;
  log?: (line: string) => void;
}

export interface Report {
  name: string;
  workflows: number;
  completed: number;
  failed: string[];
  actions: number;
  faults: Record<string, number>;
  applied: number;
  replayed: number;
  reconciled: number;
  contended: number;
  uncertain: number;
  byProbe: number;
  bySignal: number;
  signalsSent: number;
  duplicates: number;
  safeRepeats: number;
  staleLanded: number;
  staleRejected: number;
  stuck: number;
  resultMismatches: number;
  writtenNotDone: number;
  missingReconcile: number;
  stillUncertain: number;
  ledgerRows: number;
  problems: string[];
}

/** How long a ReconcileWorkflow waits before the operator resolves it by signal. */
const OPERATOR_PATIENCE_MS = 4_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const between = (min: number, max: number) => min + Math.floor(Math.random() * (max - min + 1));
const pick = <T>(items: readonly T[]): T => items[Math.floor(Math.random() * items.length)]!;

/** Runs one scenario to the end (faults stopped, every workflow finished or timed out) and checks it. */
export async function runScenario(cluster: Cluster, options: ScenarioOptions): Promise<Report> {
  const prefix = `${options.name}-${cluster.tag}-`;
  const log = options.log ?? (() => {});
  const { client, taskQueue } = cluster;
  const faults: Record<string, number> = {};
  const bump = (kind: string, by = 1) => {
    faults[kind] = (faults[kind] ?? 0) + by;
  };
  const counts = { applied: 0, replayed: 0, reconciled: 0, actions: 0, contended: 0, stale: 0 };
  const failed: string[] = [];
  let started = 0;
  let completed = 0;
  let signalsSent = 0;
  let stopFaults = false;
  let stopOperator = false;

  const off = cluster.onEvent((event: WorkerEvent) => {
    if (!event.key.startsWith(prefix)) return;
    if (event.kind === 'CONTENDED') counts.contended++;
    else if (event.kind === 'STALE') counts.stale++;
    else if (event.kind === 'LOST') bump('lost-response');
  });

  // --- the workload -----------------------------------------------------------------------------
  const makeJob = (): Call[] => {
    const calls: Call[] = [];
    const n = between(1, 3);
    for (let i = 0; i < n; i++) {
      const previous = calls.at(-1);
      if (previous && Math.random() < 0.2) {
        calls.push(previous); // the same step again: must replay, never apply twice
        continue;
      }
      calls.push({
        effect: Math.random() < (options.safe ?? 0.2) ? 'postSafe' : 'post',
        step: `c${i}`,
        input: {
          resource: `${prefix}r${between(0, options.resources - 1)}`,
          value: between(1, 1_000_000),
          delayMs: between(...(options.delayMs ?? [0, 400])),
          afterMs: Math.random() < 0.3 ? between(50, 400) : 0,
          loseResponse: Math.random() < options.loseResponse,
          probe: Math.random() >= (options.probeBlind ?? 0.25),
        },
      });
    }
    return calls;
  };

  const deadline = { at: Number.POSITIVE_INFINITY };
  const runJob = async (index: number): Promise<void> => {
    const workflowId = `${prefix}w${index}`;
    const calls = makeJob();
    counts.actions += calls.length;
    for (;;) {
      try {
        await client.workflow.start('faultJob', { taskQueue, workflowId, args: [calls] });
        break;
      } catch (error) {
        if (error instanceof WorkflowExecutionAlreadyStartedError) break;
        if (Date.now() > deadline.at) {
          failed.push(`${workflowId}: never started (${String(error)})`);
          return;
        }
        await sleep(500); // the server is down: try again
      }
    }
    const handle = client.workflow.getHandle(workflowId);
    for (;;) {
      const remaining = deadline.at - Date.now();
      if (remaining <= 0) {
        failed.push(`${workflowId}: not finished before the drain deadline`);
        return;
      }
      try {
        const outcomes = (await Promise.race([
          handle.result(),
          sleep(Math.min(remaining, 15_000)).then(() => 'timeout' as const),
        ])) as SideEffectOutcome<PostResult>[] | 'timeout';
        if (outcomes === 'timeout') continue;
        for (const outcome of outcomes) counts[outcome.outcome]++;
        completed++;
        return;
      } catch (error) {
        if (error instanceof WorkflowFailedError) {
          failed.push(`${workflowId}: ${error.cause?.message ?? error.message}`);
          return;
        }
        await sleep(500); // connection trouble while the server restarts
      }
    }
  };

  const startedAt = Date.now();
  const moreJobs = () =>
    options.durationMs !== undefined
      ? Date.now() - startedAt < options.durationMs
      : started < (options.workflows ?? 0);

  const jobs: Promise<void>[] = [];
  const pump = (async () => {
    const inFlight = new Set<Promise<void>>();
    while (moreJobs()) {
      if (inFlight.size >= options.concurrency) {
        await Promise.race(inFlight);
        continue;
      }
      const job = runJob(started++);
      jobs.push(job);
      inFlight.add(job);
      void job.finally(() => inFlight.delete(job));
      await sleep(30);
    }
  })();

  // --- the faults ------------------------------------------------------------------------------
  const background: Promise<unknown>[] = [];
  const { ttlMs } = cluster.options;
  const inject = async (kind: FaultKind): Promise<void> => {
    switch (kind) {
      case 'kill': {
        const slot = cluster.running();
        if (slot.length > 0 && cluster.kill(pick(slot))) bump(kind);
        return;
      }
      case 'kill-mid-apply':
      case 'kill-after-write': {
        const event = await cluster.next(
          kind === 'kill-mid-apply' ? 'APPLY' : 'WROTE',
          prefix,
          5_000,
        );
        if (event && cluster.kill(event.slot)) bump(kind);
        return;
      }
      case 'pause': {
        if (cluster.slots.some((slot) => slot.paused) || cluster.running().length < 2) return;
        const event = await cluster.next('APPLY', prefix, 5_000);
        if (!event || cluster.running().length < 2) return;
        // Longer than the lease and the activity's 2 s heartbeat timeout: another worker takes
        // over meanwhile. Varied, so the resume lands before, during or after the reconcile.
        const paused = cluster.pause(
          event.slot,
          between(...(options.pauseMs ?? [ttlMs + 2_000, 2 * ttlMs + 4_000])),
        );
        if (event.slot.paused) bump(kind);
        background.push(paused);
        return;
      }
      case 'pg-terminate': {
        // Mid-operation: prefer backends running a statement right now.
        for (let attempt = 0; attempt < 20; attempt++) {
          const { rows } = await cluster.db.pool.query<{ n: number }>(
            `select count(*) filter (where pg_terminate_backend(pid))::int as n
               from pg_stat_activity
              where application_name like $1 and pid <> pg_backend_pid()
                and (state = 'active' or $2)`,
            [`${cluster.appNamePrefix}%`, attempt === 19],
          );
          if (rows[0]!.n > 0) {
            bump(kind);
            bump('pg-backends-killed', rows[0]!.n);
            return;
          }
          await sleep(25);
        }
        return;
      }
      case 'pg-cut': {
        const mode: CutMode = Math.random() < 0.5 ? 'refuse' : 'blackhole';
        bump(kind);
        await cluster.proxy.cut(between(1_500, 4_000), mode);
        return;
      }
      case 'temporal-restart': {
        bump(kind);
        await cluster.temporal.stop();
        await sleep(between(1_000, 3_000));
        await cluster.temporal.start();
        return;
      }
    }
  };
  const faultLoop = (async () => {
    if (options.faults.length === 0) return;
    const order = [...options.faults].sort(() => Math.random() - 0.5);
    await sleep(500);
    for (let n = 0; !stopFaults && n < (options.maxFaults ?? Number.POSITIVE_INFINITY); n++) {
      await inject(order[n % order.length]!);
      await sleep(between(...options.faultGapMs));
    }
  })();

  // --- the operator: resolves by signal what no probe decided ----------------------------------
  const signalled = new Set<string>();
  const operator = (async () => {
    while (!stopOperator) {
      await sleep(700);
      try {
        const { rows } = await cluster.db.pool.query<{ key: string; resource: string }>(
          `select key, resource from keys where state = 'uncertain' and left(key, length($1)) = $1`,
          [prefix],
        );
        for (const { key, resource } of rows) {
          const handle = client.workflow.getHandle(reconcileWorkflowId(key));
          const status: ReconcileStatus | undefined = await handle
            .query(statusQuery)
            .catch(() => undefined);
          // Like a person, give the probe a moment before looking at the downstream by hand.
          if (status?.state !== 'waiting') continue;
          if (Date.now() - Date.parse(status.waitingSince) < OPERATOR_PATIENCE_MS) continue;
          const run = `${key}@${status.waitingSince}`;
          if (signalled.has(run)) continue;
          const rowsOfKey = await readLedger(
            cluster.db.pool,
            cluster.sink,
            cluster.store,
            key,
            resource,
            cluster.options.fencedProbe,
          );
          await handle.signal(resolveSignal, {
            ...verdictFromLedger(rowsOfKey),
            reason: 'operator read the ledger',
            by: 'faults-operator',
            // The operator read every row of the key: the verdict holds for any attempt.
            attempt: 'any',
          });
          signalled.add(run);
          signalsSent++;
        }
      } catch {
        // Temporal or Postgres is down for a moment: look again on the next round.
      }
    }
  })();

  // --- progress --------------------------------------------------------------------------------
  const progress = options.progressEveryMs
    ? setInterval(() => {
        void duplicatesSoFar(cluster, prefix).then(
          (duplicates) =>
            log(
              `[${options.name} ${formatElapsed(Date.now() - startedAt)}] workflows ${completed}/${started} done, ` +
                `actions ${counts.actions}, faults ${formatFaults(faults)}, duplicates so far ${duplicates}`,
            ),
          () => {},
        );
      }, options.progressEveryMs)
    : undefined;

  await pump;
  stopFaults = true;
  await faultLoop;
  await Promise.all(background);
  deadline.at = Date.now() + (options.drainTimeoutMs ?? 120_000);
  log(
    `[${options.name} ${formatElapsed(Date.now() - startedAt)}] all started, faults over; draining ${started - completed} workflow(s)`,
  );
  await Promise.all(jobs);
  stopOperator = true;
  await operator;
  if (progress) clearInterval(progress);

  // What nobody retried: sweep after the TTL, as the worker sweepers would, then give their
  // sweepers a round to start a ReconcileWorkflow for anything that became uncertain.
  await sleep(ttlMs + 500);
  const swept = await cluster.store.sweep();
  if (swept.uncertain.length > 0) await sleep(3 * cluster.options.sweepEveryMs);
  off();
  log(`[${options.name} ${formatElapsed(Date.now() - startedAt)}] drained; checking`);

  const report = await check(cluster, prefix, {
    name: options.name,
    workflows: started,
    completed,
    failed,
    actions: counts.actions,
    faults,
    applied: counts.applied,
    replayed: counts.replayed,
    reconciled: counts.reconciled,
    contended: counts.contended,
    staleRejected: counts.stale,
    signalsSent,
  });
  return report;
}

type Driven = Pick<
  Report,
  | 'name'
  | 'workflows'
  | 'completed'
  | 'failed'
  | 'actions'
  | 'faults'
  | 'applied'
  | 'replayed'
  | 'reconciled'
  | 'contended'
  | 'staleRejected'
  | 'signalsSent'
>;

async function duplicatesSoFar(cluster: Cluster, prefix: string): Promise<number> {
  const { rows } = await cluster.db.pool.query<{ n: number }>(
    `select count(*)::int as n from (
       select key from ledger where left(key, length($1)) = $1 and not safe
        group by key having count(*) > 1) d`,
    [prefix],
  );
  return rows[0]!.n;
}

/** The checker: judges the run from the ledger, the store and the Temporal server alone. */
export async function check(cluster: Cluster, prefix: string, driven: Driven): Promise<Report> {
  const pool = cluster.db.pool;
  const q = async <R extends object>(sql: string): Promise<R[]> =>
    (await pool.query<R & object>(sql, [prefix])).rows as R[];
  const problems: string[] = [];

  // Keys applied more than once downstream (a `safe` key may legitimately repeat).
  const repeated = await q<{ key: string; safe: boolean; n: number }>(
    `select key, bool_and(safe) as safe, count(*)::int as n from ledger
      where left(key, length($1)) = $1 group by key having count(*) > 1`,
  );
  const duplicates = repeated.filter((row) => !row.safe);
  for (const row of duplicates) problems.push(`duplicate: ${row.key} written ${row.n} times`);

  // Stale writes that landed: per resource, in commit order, a fence below an earlier one.
  const stale = await q<{
    seq: number;
    key: string;
    resource: string;
    fence: number;
    prev: number;
  }>(
    `select seq, key, resource, fence::int, prev::int from (
       select seq, key, resource, fence, max(fence) over (
         partition by resource order by seq rows between unbounded preceding and 1 preceding) as prev
       from ledger where left(resource, length($1)) = $1) t
     where fence < prev`,
  );
  for (const row of stale)
    problems.push(
      `stale write landed: ${row.key} fence ${row.fence} after ${row.prev} (#${row.seq})`,
    );

  // Keys claiming a hold nobody has any more.
  const stuck = await q<{ key: string; state: string }>(
    `select k.key, k.state from keys k left join resources r on r.resource = k.resource
      where left(k.key, length($1)) = $1 and k.state in ('held', 'applying')
        and not coalesce(r.holder = k.key and r.expires_at > clock_timestamp(), false)`,
  );
  for (const row of stuck) problems.push(`stuck: ${row.key} ${row.state} without a live lease`);

  // Every done key's stored result is its ledger write.
  const keys = await q<{ key: string; state: string; retry_safety: string; result: Buffer | null }>(
    `select key, state, retry_safety, result from keys where left(key, length($1)) = $1`,
  );
  const ledger = await q<{ seq: number; key: string; fence: number; value: number }>(
    `select seq::int, key, fence::int, value from ledger where left(key, length($1)) = $1 order by seq`,
  );
  const rowsByKey = new Map<string, typeof ledger>();
  for (const row of ledger) rowsByKey.set(row.key, [...(rowsByKey.get(row.key) ?? []), row]);
  let resultMismatches = 0;
  let writtenNotDone = 0;
  for (const record of keys) {
    const rows = rowsByKey.get(record.key) ?? [];
    if (record.state !== 'done') {
      if (rows.length > 0) {
        writtenNotDone++;
        problems.push(`written but ${record.state}: ${record.key}`);
      }
      continue;
    }
    const result = record.result
      ? (decodeJson({ payload: record.result }) as PostResult | null)
      : null;
    const matches = rows.some(
      (row) =>
        result !== null &&
        row.seq === result.seq &&
        row.value === result.value &&
        row.fence === result.fence,
    );
    if (!matches) {
      resultMismatches++;
      problems.push(
        `result of ${record.key} (${JSON.stringify(result)}) is not its ledger write (${JSON.stringify(rows)})`,
      );
    }
  }

  // Every key that was ever uncertain has a ReconcileWorkflow on our server.
  const everUncertain = await q<{ key: string }>(
    `select distinct key from events where to_state = 'uncertain' and left(key, length($1)) = $1`,
  );
  let missingReconcile = 0;
  for (const { key } of everUncertain) {
    const found = await cluster.client.workflow
      .getHandle(reconcileWorkflowId(key))
      .describe()
      .then(
        () => true,
        () => false,
      );
    if (!found) {
      missingReconcile++;
      problems.push(`no ReconcileWorkflow for uncertain key ${key}`);
    }
  }
  const deciders = await q<{ actor: string; n: number }>(
    `select actor, count(*)::int as n from events
      where from_state = 'uncertain' and left(key, length($1)) = $1 group by actor`,
  );
  const byProbe = deciders.filter((d) => d.actor.startsWith('probe:')).reduce((s, d) => s + d.n, 0);
  const bySignal = deciders
    .filter((d) => d.actor === 'faults-operator')
    .reduce((s, d) => s + d.n, 0);

  for (const failure of driven.failed) problems.push(`workflow: ${failure}`);
  return {
    ...driven,
    uncertain: everUncertain.length,
    byProbe,
    bySignal,
    duplicates: duplicates.length,
    safeRepeats: repeated.length - duplicates.length,
    staleLanded: stale.length,
    stuck: stuck.length,
    resultMismatches,
    writtenNotDone,
    missingReconcile,
    stillUncertain: keys.filter((k) => k.state === 'uncertain').length,
    ledgerRows: ledger.length,
    problems,
  };
}

export function formatFaults(faults: Record<string, number>): string {
  const entries = Object.entries(faults).filter(([, n]) => n > 0);
  return entries.length === 0 ? 'none' : entries.map(([kind, n]) => `${kind}:${n}`).join(' ');
}

function formatElapsed(ms: number): string {
  const s = Math.floor(ms / 1000);
  return `${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}`;
}

const COLUMNS: Array<[string, (r: Report) => string | number]> = [
  ['scenario', (r) => r.name],
  ['workflows done', (r) => `${r.completed}/${r.workflows}`],
  ['actions', (r) => r.actions],
  ['applied', (r) => r.applied],
  ['replayed', (r) => r.replayed],
  ['reconciled', (r) => r.reconciled],
  ['contended', (r) => r.contended],
  ['uncertain', (r) => r.uncertain],
  ['by probe', (r) => r.byProbe],
  ['by signal', (r) => r.bySignal],
  ['duplicates', (r) => r.duplicates],
  ['safe repeats', (r) => r.safeRepeats],
  ['stale landed', (r) => r.staleLanded],
  ['stale rejected', (r) => r.staleRejected],
  ['stuck', (r) => r.stuck],
  ['result mismatch', (r) => r.resultMismatches],
  ['no reconcile wf', (r) => r.missingReconcile],
];

/** One row per scenario, then each scenario's faults by kind. */
export function formatTable(reports: Report[]): string {
  const header = COLUMNS.map(([name]) => name);
  const rows = reports.map((report) => COLUMNS.map(([, get]) => String(get(report))));
  const widths = header.map((name, i) =>
    Math.max(name.length, ...rows.map((row) => row[i]!.length)),
  );
  const line = (cells: string[]) =>
    `| ${cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join(' | ')} |`;
  const rule = `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`;
  const faults = reports.map(
    (r) => `  ${r.name.padEnd(widths[0]!)}  faults: ${formatFaults(r.faults)}`,
  );
  return [line(header), rule, ...rows.map(line), '', ...faults].join('\n');
}
