/** The exclusive-writes lane's plan, shared by the test and its worker processes. */
import type { RetrySafety } from '../../src/core/index.js';
import type { OutcomeCounts } from '../support/worker-process.js';

/** What the parent tells each worker process. */
export interface ExclusiveConfig {
  worker: number;
  seed: number;
  schema: string;
  databaseUrl: string;
  keys: number;
  resources: number;
  callers: number;
  /** The pool's connections, shared by the store and the sink. */
  poolSize: number;
  ttls: number[];
  /** Attempts paused past their TTL before the write (a quarter of this after it). */
  pauseRate: number;
  /** Attempts failing before the write, and (apart) after it. */
  failRate: number;
  /** Executes one key may take before it counts as unfinished: a budget of work, not of time. */
  attemptsPerKey: number;
}

/** What each worker process reports back. */
export interface ExclusiveReport extends OutcomeCounts {
  worker: number;
  executes: number;
  applies: number;
  staleRejected: number;
  pausedPastTtl: number;
  unfinished: string[];
}

const safeties: RetrySafety[] = ['unknown', 'safe', 'unsafe'];

/**
 * Key `index` of the plan: every process derives the same action for it. Even keys are
 * transactional, odd ones plain, and each pair shares a resource, so every resource gets both.
 */
export function exclusiveKey(
  index: number,
  config: Pick<ExclusiveConfig, 'resources'>,
): { key: string; resource: string; mode: 'plain' | 'transactional'; retrySafety: RetrySafety } {
  return {
    key: `key-${index}`,
    resource: `res-${Math.floor(index / 2) % config.resources}`,
    mode: index % 2 === 0 ? 'transactional' : 'plain',
    retrySafety: safeties[Math.floor(index / 2) % safeties.length]!,
  };
}
