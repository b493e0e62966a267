export * from './errors.js';
export { decodeJson, encodeJson, NotJsonError } from './json.js';
export { maskConnectionString } from './mask.js';
export * from './runner.js';
export {
  type FencedSink,
  isTransactionalStore,
  type ListFilter,
  type Store,
  type TransactionalStore,
  type TransactionContext,
} from './store.js';
export * from './types.js';
export {
  checkAction,
  checkLeaseTtl,
  checkResolution,
  checkTtl,
  defaultLimits,
  type Limits,
} from './validate.js';
