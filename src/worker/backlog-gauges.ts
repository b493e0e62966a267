import { Runtime } from '@temporalio/worker';
import type { SweepAndReconcileReport } from '../activities/reconcile-activities.js';
import {
  DURABILITY_RISKS_METRIC,
  UNCERTAIN_OLDEST_AGE_METRIC,
  UNCERTAIN_OPEN_METRIC,
} from '../protocol/metrics.js';

/**
 * Publishes the uncertain backlog a sweep saw on the worker Runtime's metric
 * meter (its Prometheus endpoint, if configured). Without it a stuck payment
 * is only an hourly log line; with it an alert can fire on age or count.
 */
export function publishBacklog(report: SweepAndReconcileReport): void {
  setGauges(report.backlog.count, report.backlog.oldestAgeMs / 1000);
}

/**
 * Zero on every gauge only the sweep leader sets (the backlog's and the durability risks'): what
 * a process reports once it is not the leader, so its last reading does not outlive the facts.
 */
export function clearBacklog(): void {
  setGauges(0, 0);
  publishDurabilityRisks(0);
}

/** The ways the store can lose an acknowledged commit, as the leader's DurabilityWatch read them. */
export function publishDurabilityRisks(count: number): void {
  Runtime.instance()
    .metricMeter.createGauge(
      DURABILITY_RISKS_METRIC,
      'int',
      '',
      'ways the store can lose an acknowledged commit, as the sweep leader last read it',
    )
    .set(count);
}

function setGauges(open: number, oldestAgeSeconds: number): void {
  const meter = Runtime.instance().metricMeter;
  meter
    .createGauge(UNCERTAIN_OPEN_METRIC, 'int', '', 'uncertain keys waiting for a verdict')
    .set(open);
  meter
    .createGauge(
      UNCERTAIN_OLDEST_AGE_METRIC,
      'float',
      '',
      'how long the oldest uncertain key has waited, in seconds',
    )
    .set(oldestAgeSeconds);
}
