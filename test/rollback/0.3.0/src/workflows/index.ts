/**
 * Workflow-safe entry point (`sideeffect/workflows`): the calls a workflow makes, the
 * ReconcileWorkflow with its public signal, Update and queries, the failure types and the metric
 * names. Your workflows file must re-export the library's workflows so they run in the same
 * bundle:
 *
 *   export { ReconcileWorkflow } from 'sideeffect/workflows';
 *
 * The messages the library's own activities and workflows exchange (subscriptions, effect
 * requests, probe activity names) live in src/protocol and are not exported: they are a contract
 * between two copies of this library, kept stable across versions, not an API.
 */
export { SideEffectFailureType } from '../protocol/failures.js';
export * from '../protocol/metrics.js';
export {
  type AttemptTimes,
  type EarlierVerdict,
  libraryActivityNames,
  type ReconcileInput,
  type ReconcileResolution,
  type ReconcileStatus,
  type RejectedResolve,
  type ResolveInput,
  recheckSignal,
  reconcileWorkflowId,
  resolveSignal,
  resolveUpdate,
  searchAttributeKeys,
  statusQuery,
  type UncertainDetails,
  type Verdict,
  verdictJson,
  waitingQuery,
} from '../protocol/wire.js';
export { ReconcileWorkflow } from './reconcile.js';
export {
  type EffectInput,
  type EffectName,
  type EffectResult,
  type EffectShape,
  proxySideEffects,
  runSideEffect,
  type SideEffectOptions,
  type SideEffectOutcome,
  type SideEffectsFor,
  sideEffect,
} from './side-effect.js';
export { type SideEffectCall, type SideEffectCallFor, sideEffects } from './side-effects.js';
