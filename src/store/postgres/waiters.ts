import { type Release, KeyedGate } from '../../syncx/index.js';

/**
 * How many of one store's acquire calls may be in flight for one resource, and how long the
 * others should wait before asking again. Each call in flight may wait on the resource's row lock
 * (a transactional holder keeps it for its whole work) for up to `lockWaitMs`, on a pool
 * connection; without a bound in the process, 80 callers of one busy resource held every
 * connection of a pool of 10 and every other resource's calls queued behind them for seconds.
 * The calls turned away take no connection and cost nothing.
 */
export class ResourceWaiters {
  readonly #gate: KeyedGate<string>;
  readonly #lockWaitMs: number;
  /** When each call now in flight for a resource went in. */
  readonly #since = new Map<string, number[]>();

  constructor(perResource: number, lockWaitMs: number) {
    this.#gate = new KeyedGate(perResource);
    this.#lockWaitMs = lockWaitMs;
  }

  /** A slot for one call on `resource`, or undefined when that resource has all its callers already. */
  enter(resource: string): Release | undefined {
    const release = this.#gate.tryAcquire(resource);
    if (release === undefined) return undefined;
    const at = performance.now();
    const since = this.#since.get(resource);
    if (since) since.push(at);
    else this.#since.set(resource, [at]);
    let left = false;
    return () => {
      if (left) return;
      left = true;
      release();
      const entries = this.#since.get(resource)!;
      entries.splice(entries.indexOf(at), 1);
      if (entries.length === 0) this.#since.delete(resource);
    };
  }

  /**
   * How long until the earliest call in flight on `resource` has its answer at the latest (its
   * lock wait ends by then): when a turned-away caller has a chance of a slot, and of an answer
   * that is no longer the same lock.
   */
  retryAfterMs(resource: string): number {
    const since = this.#since.get(resource);
    if (!since) return 1;
    const waited = performance.now() - Math.min(...since);
    return Math.min(this.#lockWaitMs, Math.max(1, Math.ceil(this.#lockWaitMs - waited)));
  }
}
