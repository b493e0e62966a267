/**
 * The store's entry for the `sideeffect` CLI, beside the public `./index.js`: what an operator's
 * tool needs and an app does not (checking a schema name before connecting, reading Postgres's
 * refusals, judging a schema a newer version migrated, the database clock). Kept out of the
 * package's exports so the public API does not grow for one in-package caller; the CLI imports
 * the store through these two entries only, never the files behind them.
 */
export { databaseNow } from './clock.js';
export {
  connectionRefusal,
  connectionTarget,
  refuseStandby,
  unconfiguredConnection,
} from './connection.js';
export { type DoctorReport, diagnose, type Finding } from './doctor.js';
export type { RoleKind } from './grants.js';
export { newerSchema } from './newer-schema.js';
export { defaultSchema, quoteSchema } from './sql.js';
export type { StoreStats } from './stats.js';
export { LEASES } from './transactional-lease.js';
