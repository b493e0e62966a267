import { Runtime } from '@temporalio/worker';
import type { SweepAndReconcileReport } from '../activities/index.js';
import { UNCERTAIN_OLDEST_AGE_METRIC, UNCERTAIN_OPEN_METRIC } from '../workflows/metrics.js';

/**
 * Publishes the uncertain backlog a sweep saw on the worker Runtime's metric
 * meter (its Prometheus endpoint, if configured). Without it a stuck payment
 * is only an hourly log line; with it an alert can fire on age or count.
 */
export function publishBacklog(report: SweepAndReconcileReport): void {
  const meter = Runtime.instance().metricMeter;
  meter
    .createGauge(UNCERTAIN_OPEN_METRIC, 'int', 'keys', 'uncertain keys waiting for a verdict')
    .set(report.backlog.count);
  meter
    .createGauge(
      UNCERTAIN_OLDEST_AGE_METRIC,
      'float',
      's',
      'how long the oldest uncertain key has waited',
    )
    .set(report.backlog.oldestAgeMs / 1000);
}
