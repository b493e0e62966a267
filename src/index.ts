/**
 * The core contract (Runner, Store and FencedSink, types, typed errors) and the in-memory store.
 * Everything else has its own entry point, so each side imports only what it can run:
 * `sideeffect/postgres` (PgStore, PgFencedSink, migrations), `sideeffect/activities` and
 * `sideeffect/worker` (Node), `sideeffect/workflows` (workflow-safe), `sideeffect/syncx` (gates
 * and fan-in).
 */
export * from './core/index.js';
export * from './deprecated.js';
export {
  MemoryFencedSink,
  type MemorySinkWrite,
  MemoryStore,
  type MemoryStoreOptions,
} from './store/memory.js';
