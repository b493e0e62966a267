/**
 * What a guarded call needs: the Runner and its types, the in-memory store, and the errors a
 * caller catches (each with `code` and `next`). Everything else has its own entry point, so each
 * side imports only what it can run: `sideeffect/postgres` (PgStore, PgFencedSink, migrations),
 * `sideeffect/activities` and `sideeffect/worker` (Node), `sideeffect/workflows`
 * (workflow-safe), `sideeffect/syncx` (gates and fan-in), `sideeffect/testing`, and
 * `sideeffect/store` (what only a custom store's author needs).
 */
export {
  type Action,
  type ApplyContext,
  BreakerOpenError,
  ContendedError,
  decodeJson,
  type ExecuteOptions,
  type Execution,
  encodeJson,
  hasCode,
  maskConnectionString,
  type NextStep,
  NotAppliedError,
  OutcomeUncertainError,
  type Result,
  type RetrySafety,
  Runner,
  SideEffectError,
  type SideEffectErrorCode,
  type Store,
} from './core/index.js';
export { MemoryStore, type MemoryStoreOptions } from './store/memory.js';
