import type { RetrySafety } from '../../../src/core/index.js';
import type { BatchingMode } from '../../support/batching.js';
import type { OutcomeCounts } from '../../support/worker-process.js';

/** What the parent tells each worker process. */
export interface WorkerConfig {
  worker: number;
  seed: number;
  schema: string;
  /** Where the worker connects: the test database, one with another default isolation, or PgBouncer. */
  databaseUrl: string;
  /** The store and sink are told they sit behind a transaction-mode pooler. */
  transactionPooling: boolean;
  keys: number;
  resources: number;
  lanes: number;
  /** The pool's size; default one connection per lane. */
  connections?: number;
  ttls: number[];
  pauseRate: number;
  failBeforeRate: number;
  failAfterRate: number;
  /**
   * Executes one key may take before the worker gives it up as unfinished: a budget of work, not
   * of seconds, so a loaded machine slows the run without failing it, and a key that cannot end
   * (a livelock, a lost wake-up) still fails it.
   */
  attemptsPerKey: number;
  /** Run every key through Runner.executeInTransaction, the ledger insert on the store's transaction. */
  transactional?: boolean;
  /** How the store groups calls; default SIDEEFFECT_TEST_BATCHING's. */
  batching?: BatchingMode;
}

/** What each worker process reports back. */
export interface WorkerReport extends OutcomeCounts {
  worker: number;
  executes: number;
  applies: number;
  staleRejected: number;
  pauses: number;
  /** The most executes one key took. */
  mostAttempts: number;
  unfinished: string[];
}

const safeties: RetrySafety[] = ['unknown', 'safe', 'unsafe'];

/** Key `index` of the shared plan: every worker derives the same action for it. */
export function keyOf(
  index: number,
  config: Pick<WorkerConfig, 'resources'>,
): { key: string; resource: string; retrySafety: RetrySafety } {
  return {
    key: `key-${index}`,
    resource: `res-${index % config.resources}`,
    retrySafety: safeties[index % safeties.length]!,
  };
}
