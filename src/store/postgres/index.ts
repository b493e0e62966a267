export { connectionConfig } from './connection.js';
export { grantsScript, type RoleKind } from './grants.js';
export {
  listMigrations,
  type MigrateOptions,
  type Migration,
  type MigrationStatus,
  migrate,
  migrationScript,
  migrationStatus,
} from './migrate.js';
export { PgFencedSink, type PgFencedSinkOptions } from './sink.js';
export type { PoolOptions } from './sql.js';
export { type ResolutionStats, type StoreStats, storeStats } from './stats.js';
export { PgStore, type PgStoreOptions } from './store.js';
