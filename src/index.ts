/**
 * The contract, the Runner and the stores. Temporal pieces live in their own
 * entry points so each side imports only what it can run:
 * `sideeffect/activities`, `sideeffect/worker` (Node) and
 * `sideeffect/workflows` (workflow-safe).
 */
export * from './core/index.js';
export {
  MemoryFencedSink,
  type MemorySinkWrite,
  MemoryStore,
  type MemoryStoreOptions,
} from './store/memory.js';
export {
  migrate,
  PgFencedSink,
  type PgFencedSinkOptions,
  PgStore,
  type PgStoreOptions,
  type PoolOptions,
} from './store/postgres/index.js';
export * from './syncx/index.js';
