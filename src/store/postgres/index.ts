export { connectionConfig } from './connection.js';
export { checkDurability } from './durability.js';
export { grantsScript } from './grants.js';
export {
  type MigrateOptions,
  migrate,
  migrationScript,
  migrationStatus,
} from './migrate.js';
export { PgFencedSink, type PgFencedSinkOptions } from './sink.js';
export { storeStats } from './stats.js';
export { PgStore } from './store.js';
export type { PgStoreOptions } from './store-options.js';
