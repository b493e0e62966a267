export * from './errors.js';
export { decodeJson, encodeJson, NotJsonError } from './json.js';
export { maskConnectionString } from './mask.js';
export * from './runner.js';
export type { FencedSink, ListFilter, Store } from './store.js';
export * from './types.js';
export {
  checkAction,
  checkLeaseTtl,
  checkResolution,
  checkTtl,
  defaultLimits,
  type Limits,
} from './validate.js';
