/**
 * The fault harness at scale: the mixed scenario (every fault kind, lost responses, contention)
 * runs continuously for N minutes, with a progress line every ~10 s; then the checker runs, the
 * table is printed, and the exit code is non-zero if any duplicate, stale write or stuck key
 * (or unfinished workflow, mismatched result, uncertain key without a ReconcileWorkflow) is found.
 *
 *   npm run soak -- --minutes 10        (or: npx tsx test/faults/soak.ts --minutes 10)
 *   options: --workers 4 --concurrency 16 --resources 6 --faults kill,pause,... --unfenced-probe
 *            --keep-schema
 */
import { parseArgs } from 'node:util';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { Cluster } from './cluster.js';
import { FAULT_KINDS, type FaultKind, formatTable, runScenario } from './scenario.js';

Runtime.install({ logger: new DefaultLogger('ERROR') });

const { values } = parseArgs({
  args: process.argv.slice(2).filter((arg) => arg !== '--'),
  options: {
    minutes: { type: 'string', default: '10' },
    workers: { type: 'string', default: '4' },
    concurrency: { type: 'string', default: '16' },
    resources: { type: 'string', default: '6' },
    faults: { type: 'string', default: FAULT_KINDS.join(',') },
    'unfenced-probe': { type: 'boolean', default: false },
    'keep-schema': { type: 'boolean', default: false },
  },
});
const number = (name: string, text: string | undefined): number => {
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) {
    process.stderr.write(`soak: --${name} must be a positive number, got ${text}\n`);
    process.exit(2);
  }
  return value;
};
const minutes = number('minutes', values.minutes);
const faults = values.faults!.split(',').filter(Boolean) as FaultKind[];
const unknownFault = faults.find((kind) => !(FAULT_KINDS as readonly string[]).includes(kind));
if (unknownFault) {
  process.stderr.write(`soak: unknown fault "${unknownFault}"; known: ${FAULT_KINDS.join(',')}\n`);
  process.exit(2);
}
const log = (line: string) => process.stdout.write(`${line}\n`);

const cluster = await Cluster.start({
  workers: number('workers', values.workers),
  ttlMs: 1_500,
  sweepEveryMs: 1_000,
  fencedProbe: !values['unfenced-probe'],
  log,
});
let exitCode = 1;
let closing: Promise<void> | undefined;
const close = () => {
  const keep = values['keep-schema'] || exitCode !== 0;
  closing ??= cluster.close({ keepSchema: keep, keepFiles: keep });
  return closing;
};
// Ctrl-C: stop the workers and our own Temporal server instead of leaving them behind.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log(`soak: ${signal}, stopping`);
    void close().finally(() => process.exit(130));
  });
}
try {
  const startedAt = Date.now();
  const report = await runScenario(cluster, {
    name: 'soak',
    faults,
    durationMs: minutes * 60_000,
    concurrency: number('concurrency', values.concurrency),
    resources: number('resources', values.resources),
    faultGapMs: [1_000, 4_000],
    loseResponse: 0.1,
    progressEveryMs: 10_000,
    drainTimeoutMs: 180_000,
    log,
  });
  log(
    `\nsoak: ${((Date.now() - startedAt) / 60_000).toFixed(1)} min, ${report.ledgerRows} ledger rows`,
  );
  log(formatTable([report]));
  for (const problem of report.problems.slice(0, 50)) log(`  problem: ${problem}`);
  const bad =
    report.duplicates +
    report.staleLanded +
    report.stuck +
    report.resultMismatches +
    report.missingReconcile +
    report.failed.length;
  exitCode = bad === 0 ? 0 : 1;
  log(exitCode === 0 ? 'soak: OK' : 'soak: FAILED');
} finally {
  await close();
}
process.exit(exitCode);
