export * from './core/index.js';
export { MemoryFencedSink, MemoryStore, type MemorySinkWrite, type MemoryStoreOptions } from './store/memory.js';
