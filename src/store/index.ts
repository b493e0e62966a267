/**
 * What only a custom store's author needs (`sideeffect/store`): the store interfaces beyond
 * `Store`, the records their methods take and return, the errors the store contract says a
 * method throws (so `hasCode` and `next` work on them), and a fenced sink to test against. Kept off the root entry so a caller of the Runner learns none of it.
 */
export {
  type Acquisition,
  type BreakerPolicy,
  type BreakerRecord,
  type BreakerStore,
  type BreakerTransition,
  type FencedSink,
  FenceStaleError,
  KeyConflictError,
  type KeyEvent,
  type KeyRecord,
  markNotApplied,
  type PendingVerdict,
  type PendingVerdictStore,
  type Resolution,
  type ResolveOutcome,
  StaleVerdictError,
  StoreUnavailableError,
  type TransactionalStore,
  type TransactionContext,
  type TransactionOptions,
} from '../core/index.js';
export { MemoryFencedSink } from './memory.js';
