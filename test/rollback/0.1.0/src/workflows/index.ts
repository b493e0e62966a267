/**
 * Workflow-safe entry point (`sideeffect/workflows`). Your workflows file must
 * re-export the library's workflows so they run in the same bundle:
 *
 *   export { ReconcileWorkflow } from 'sideeffect/workflows';
 */
export { SideEffectFailureType } from './failures.js';
export {
  type EffectRequest,
  type EffectResponse,
  type EnsureReconcileRequest,
  type EnsureReconcileResponse,
  type ProbeAnswer,
  probeActivityName,
  type Reconciled,
  type ReconcileInput,
  type ReconcileResolution,
  type ReconcileStatus,
  type RejectedResolve,
  type ResolveInput,
  reconciledSignal,
  reconcileWorkflowId,
  resolveSignal,
  resolveUpdate,
  type Subscription,
  searchAttributeKeys,
  statusQuery,
  subscribeSignal,
  type UncertainDetails,
  type Verdict,
} from './protocol.js';
export { ReconcileWorkflow, resolveInputError } from './reconcile.js';
export {
  type EffectShape,
  proxySideEffects,
  runSideEffect,
  type SideEffectOptions,
  type SideEffectOutcome,
  type SideEffectsFor,
  sideEffect,
} from './side-effect.js';
export { type SideEffectCall, sideEffects } from './side-effects.js';
