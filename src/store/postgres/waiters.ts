import type { Release } from '../../syncx/gate.js';
import { KeyedGate } from '../../syncx/index.js';

/** How many busy resources are remembered before the quiet ones are looked for and forgotten. */
const FORGET_FROM = 1_024;

/** One acquire call's way through {@link ResourceWaiters}. */
export interface WaiterPass {
  /** The call has a place: its resource is busy, so it may wait for the row from the start. */
  readonly placed: boolean;
  /**
   * The call found the resource's row held: whether it may wait for it. It may if it has a place
   * or gets one now; the resource counts as busy from here on.
   */
  held(): boolean;
  /** Gives back the call's place, if it has one; idempotent. */
  leave(): void;
}

/**
 * How many of one store's acquire calls may be in flight at a time for a busy resource: one
 * whose row a call found held by another transaction (a transactional holder keeps it for its
 * whole work) within the last `lockWaitMs`. Each caller that waits for that row does so on a pool
 * connection, for up to `lockWaitMs`; without a bound in the process, 80 callers of one busy
 * resource held every connection of a pool of 10, and every other resource's calls queued behind
 * them for seconds. While a resource is busy, at most `perResource` calls go in at a time and the
 * others are turned away before they take a connection; a resource nobody found held lets every
 * call in (a replay, a grant on a free resource and a live lease's `contended` wait for nothing).
 * And at most half the pool waits for busy rows at once, whatever the number of busy resources:
 * with 63 busy resources and one place each, their waits filled a pool of 10 for lockWaitMs at a
 * time, and a free resource's call queued behind them for hundreds of milliseconds.
 */
export class ResourceWaiters {
  readonly #gate: KeyedGate<string>;
  readonly #lockWaitMs: number;
  /** When a call last found each busy resource's row held. */
  readonly #heldAt = new Map<string, number>();
  /** When each call holding a place on a resource took it. */
  readonly #since = new Map<string, number[]>();
  /** The most places held at once over all resources. */
  readonly #maxPlaces: number;
  #places = 0;

  /** `poolSize`: the connections the store's calls share; half of them (at least one) may wait. */
  constructor(perResource: number, lockWaitMs: number, poolSize: number) {
    this.#gate = new KeyedGate(perResource);
    this.#lockWaitMs = lockWaitMs;
    this.#maxPlaces = Math.max(1, Math.floor(poolSize / 2));
  }

  /** A call's way in, or undefined when the resource is busy and has all its callers in flight. */
  enter(resource: string): WaiterPass | undefined {
    let place = this.#busy(resource) ? this.#take(resource) : null;
    if (place === undefined) return undefined;
    return {
      get placed() {
        return place !== null && place !== undefined;
      },
      held: () => {
        if (this.#heldAt.size >= FORGET_FROM) this.#forgetQuiet();
        this.#heldAt.set(resource, performance.now());
        place ??= this.#take(resource);
        return place !== undefined;
      },
      leave: () => place?.(),
    };
  }

  /** The answer of a call turned away from `resource`: it waits for nothing, on no connection. */
  turnedAway(resource: string): { outcome: 'contended'; retryAfterMs: number } {
    return { outcome: 'contended', retryAfterMs: this.retryAfterMs(resource) };
  }

  /**
   * When a caller turned away from `resource` should ask again: after the earliest call in
   * flight has had its answer (its lock wait ends by then), plus a random share of `lockWaitMs`,
   * so the callers turned away meanwhile do not all come back in the same millisecond.
   */
  retryAfterMs(resource: string): number {
    const since = this.#since.get(resource);
    const left = since ? this.#lockWaitMs - (performance.now() - Math.min(...since)) : 0;
    return Math.max(1, Math.ceil(Math.max(0, left) + Math.random() * this.#lockWaitMs));
  }

  #busy(resource: string): boolean {
    const at = this.#heldAt.get(resource);
    if (at === undefined) return false;
    if (performance.now() - at < this.#lockWaitMs || this.#since.has(resource)) return true;
    this.#heldAt.delete(resource);
    return false;
  }

  /** Forgets the resources that are no longer busy, so a stream of distinct ones cannot grow the map. */
  #forgetQuiet(): void {
    for (const resource of [...this.#heldAt.keys()]) this.#busy(resource);
  }

  #take(resource: string): Release | undefined {
    if (this.#places >= this.#maxPlaces) return undefined;
    const release = this.#gate.tryAcquire(resource);
    if (release === undefined) return undefined;
    this.#places += 1;
    const at = performance.now();
    const since = this.#since.get(resource);
    if (since) since.push(at);
    else this.#since.set(resource, [at]);
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.#places -= 1;
      release();
      const entries = this.#since.get(resource)!;
      entries.splice(entries.indexOf(at), 1);
      if (entries.length === 0) this.#since.delete(resource);
    };
  }
}
