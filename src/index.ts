/**
 * The core contract (Runner, Store and FencedSink, types, typed errors) and the stores users
 * construct. Everything else has its own entry point, so each side imports only what it can run:
 * `sideeffect/postgres` (migrations), `sideeffect/activities` and `sideeffect/worker` (Node),
 * `sideeffect/workflows` (workflow-safe), `sideeffect/syncx` (gates and fan-in).
 */
export * from './core/index.js';
export {
  MemoryFencedSink,
  type MemorySinkWrite,
  MemoryStore,
  type MemoryStoreOptions,
} from './store/memory.js';
export {
  PgFencedSink,
  type PgFencedSinkOptions,
  PgStore,
  type PgStoreOptions,
  type PoolOptions,
} from './store/postgres/index.js';
