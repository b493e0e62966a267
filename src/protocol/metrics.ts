/**
 * The names and labels of the library's metrics, in one workflow-safe place so
 * the workflow, the activities and the sweeper emit the same series. They go
 * through Temporal's own metric meter, so they reach whatever the worker's
 * Runtime exports (e.g. its Prometheus endpoint) beside the SDK's metrics.
 */

/** Counter, labels `effect`, `outcome`: what each guarded call ended as. */
export const OUTCOMES_METRIC = 'sideeffect_outcomes';
/** Counter, label `effect`: uncertain keys a ReconcileWorkflow opened for (once per uncertain attempt). */
export const RECONCILES_OPENED_METRIC = 'sideeffect_reconciles_opened';
/** Counter, labels `decided_by`, `verdict`: reconciles closed, by which way the verdict came and what it said. */
export const RECONCILES_RESOLVED_METRIC = 'sideeffect_reconciles_resolved';
/** Counter, label `effect`: pending verdicts a worker's result check refused (the key stayed uncertain). */
export const PENDING_VERDICTS_REFUSED_METRIC = 'sideeffect_pending_verdicts_refused';
/**
 * Counter, labels `refusal`, `via`: verdicts a ReconcileWorkflow refused, decided nothing with,
 * and listed in its `status` query. `refusal` says why ({@link RefusalLabel}), `via` how it came
 * (`signal`, `update`, `probe`). A rising
 * `no_attempt` count means people or scripts still send verdicts that name no attempt.
 */
export const VERDICTS_REFUSED_METRIC = 'sideeffect_verdicts_refused';
/** Histogram (seconds): from the reconcile's start to its verdict. */
export const TIME_TO_RESOLUTION_METRIC = 'sideeffect_time_to_resolution_seconds';
/** Gauge: uncertain keys in the store now (set by the sweeper). */
export const UNCERTAIN_OPEN_METRIC = 'sideeffect_uncertain_open';
/** Gauge (seconds): how long the oldest uncertain key has waited, 0 when none (set by the sweeper). */
export const UNCERTAIN_OLDEST_AGE_METRIC = 'sideeffect_uncertain_oldest_age_seconds';

/** Counter, labels `group`, `from`, `to`: breaker transitions seen by this worker (it made them, or a person did). */
export const BREAKER_TRANSITIONS_METRIC = 'sideeffect_breaker_transitions';
/** Gauge, label `group`: the breaker's state as this worker last read it (0 closed, 1 half-open, 2 open). */
export const BREAKER_STATE_METRIC = 'sideeffect_breaker_state';

/**
 * Gauge: the ways the store can lose an acknowledged commit, as the sweep leader last read its
 * replication (0 when none). Rises when replication degrades while the workers run.
 */
export const DURABILITY_RISKS_METRIC = 'sideeffect_durability_risks';

/**
 * Every metric's name, for dashboards and alerts that must not drift from what the worker emits;
 * each one's kind and labels are on the constant it reads (docs/operations.md lists them).
 */
export const metricNames = {
  outcomes: OUTCOMES_METRIC,
  reconcilesOpened: RECONCILES_OPENED_METRIC,
  reconcilesResolved: RECONCILES_RESOLVED_METRIC,
  pendingVerdictsRefused: PENDING_VERDICTS_REFUSED_METRIC,
  verdictsRefused: VERDICTS_REFUSED_METRIC,
  timeToResolution: TIME_TO_RESOLUTION_METRIC,
  uncertainOpen: UNCERTAIN_OPEN_METRIC,
  uncertainOldestAge: UNCERTAIN_OLDEST_AGE_METRIC,
  breakerTransitions: BREAKER_TRANSITIONS_METRIC,
  breakerState: BREAKER_STATE_METRIC,
  durabilityRisks: DURABILITY_RISKS_METRIC,
} as const;

/**
 * How a guarded call ended, as the `outcome` label: the Runner's four
 * outcomes plus `not_applied` (granted, then failed with nothing applied:
 * prepare failed, or an apply declared safe failed) and `paused` (its
 * group's breaker is open: nothing attempted, the call waits).
 */
export type OutcomeLabel =
  | 'applied'
  | 'replayed'
  | 'contended'
  | 'uncertain'
  | 'not_applied'
  | 'paused';

/**
 * Which way a reconcile's verdict came, as the `decided_by` label: `ReconcileResolution.decidedBy`,
 * with an Update sent by `sideeffect resolve` counted as `cli`. Not who: that is the verdict's `by`.
 */
export type DecidedByLabel = 'probe' | 'signal' | 'update' | 'cli' | 'store';

/**
 * Why a verdict was refused, as the `refusal` label: it named no attempt (`no_attempt`), still
 * carried a template placeholder (`placeholder`), was malformed or failed the effect's check
 * (`invalid`), came after the decision (`late`), or the store refused it (`store`: a stale
 * attempt, a result the effect's check refused).
 */
export type RefusalLabel = 'no_attempt' | 'placeholder' | 'invalid' | 'late' | 'store';
