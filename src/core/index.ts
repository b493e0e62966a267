export {
  type BreakerAdmission,
  type BreakerAnswer,
  type BreakerCommand,
  type BreakerOutcome,
  type BreakerPolicy,
  type BreakerRecord,
  type BreakerState,
  type BreakerStore,
  type BreakerTransition,
  defaultBreakerPolicy,
  keepsBreakers,
} from './breaker.js';
export * from './error-codes.js';
export * from './errors.js';
export { decodeJson, encodeJson, NotJsonError } from './json.js';
export { maskConnectionString } from './mask.js';
export * from './runner.js';
export {
  type FencedSink,
  isTransactionalStore,
  keepsPendingVerdicts,
  type ListFilter,
  type PendingVerdictStore,
  type Store,
  type TransactionalStore,
  type TransactionContext,
  type TransactionIsolation,
  type TransactionOptions,
} from './store.js';
export * from './types.js';
export { defaultLimits, type Limits } from './validate.js';
export type {
  PendingVerdict,
  PendingVerdictOutcome,
  PendingVerdictPage,
  PendingVerdictState,
  Resolution,
  ResolveOutcome,
  VerdictJudgement,
  Withdrawal,
} from './verdict.js';
