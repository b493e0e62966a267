/**
 * The root entry point's names on their way out, each an alias of its replacement until the
 * release its tag names (a unit test fails once package.json reaches it). Kept apart so nothing
 * of the library itself imports them.
 */
import { keepsPendingVerdicts, type PendingVerdictStore } from './core/store.js';
import type { PendingVerdict, PendingVerdictOutcome, PendingVerdictState } from './core/verdict.js';
import * as postgres from './store/postgres/index.js';

/** @deprecated since 0.3.0, removed in 0.4.0: import `PgStore` from `sideeffect/postgres`, its one home; the same class. */
export const PgStore = postgres.PgStore;
/** @deprecated since 0.3.0, removed in 0.4.0: import `PgStore` from `sideeffect/postgres`. */
export type PgStore = postgres.PgStore;
/** @deprecated since 0.3.0, removed in 0.4.0: import `PgStoreOptions` from `sideeffect/postgres`. */
export type PgStoreOptions = postgres.PgStoreOptions;

/** @deprecated since 0.3.0, removed in 0.4.0: import `PgFencedSink` from `sideeffect/postgres`, its one home; the same class. */
export const PgFencedSink = postgres.PgFencedSink;
/** @deprecated since 0.3.0, removed in 0.4.0: import `PgFencedSink` from `sideeffect/postgres`. */
export type PgFencedSink = postgres.PgFencedSink;
/** @deprecated since 0.3.0, removed in 0.4.0: import `PgFencedSinkOptions` from `sideeffect/postgres`. */
export type PgFencedSinkOptions = postgres.PgFencedSinkOptions;

/** @deprecated since 0.3.0, removed in 0.4.0: import `PoolOptions` from `sideeffect/postgres`. */
export type PoolOptions = postgres.PoolOptions;

/** @deprecated since 0.3.0, removed in 0.4.0: use {@link PendingVerdict} ("held" is the key state; a verdict waiting for a worker's check is pending). */
export type HeldVerdict = PendingVerdict;
/** @deprecated since 0.3.0, removed in 0.4.0: use {@link PendingVerdictState}. */
export type HeldVerdictState = PendingVerdictState;
/** @deprecated since 0.3.0, removed in 0.4.0: use {@link PendingVerdictOutcome}. */
export type HoldOutcome = PendingVerdictOutcome;
/** @deprecated since 0.3.0, removed in 0.4.0: use {@link PendingVerdictStore} (its methods `addPendingVerdict` and `pendingVerdicts`). */
export type VerdictHolding = PendingVerdictStore;
/** @deprecated since 0.3.0, removed in 0.4.0: use {@link keepsPendingVerdicts}; the same function. */
export const holdsVerdicts = keepsPendingVerdicts;
