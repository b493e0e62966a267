/**
 * Workflow-safe entry point (`sideeffect/workflows`): the calls a workflow makes, the
 * ReconcileWorkflow with its public signal, Update and queries, the failure types with
 * {@link nextStep}, and the metric names. Your workflows file must re-export the library's workflows so they run in the same
 * bundle:
 *
 *   export { ReconcileWorkflow } from 'sideeffect/workflows';
 *
 * The messages the library's own activities and workflows exchange (subscriptions, effect
 * requests, probe activity names) live in src/protocol and are not exported: they are a contract
 * between two copies of this library, kept stable across versions, not an API.
 */
export { nextStep } from '../core/error-codes.js';
export { SideEffectFailureType } from '../protocol/failures.js';
export { metricNames } from '../protocol/metrics.js';
export {
  type ReconcileStatus,
  type ResolveInput,
  recheckSignal,
  reconcileWorkflowId,
  resolveSignal,
  resolveUpdate,
  searchAttributeKeys,
  statusQuery,
  waitingQuery,
} from '../protocol/wire.js';
export { ReconcileWorkflow } from './reconcile.js';
export {
  proxySideEffects,
  runSideEffect,
  type SideEffectOptions,
  type SideEffectOutcome,
} from './side-effect.js';
export { type SideEffectCall, sideEffects } from './side-effects.js';
