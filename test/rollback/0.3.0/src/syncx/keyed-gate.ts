import { type AcquireOptions, Gate, type Release } from './gate.js';
import { toCapacity } from './validate.js';

/**
 * An in-flight limit per key: at most `cap` holders for each key, keys independent of each
 * other ("at most 4 requests per model", "one sync per account at a time").
 *
 * Why: a 429 storm from one model or tenant must not starve the others, and a single
 * global {@link Gate} cannot express that. For one process-wide quota use `Gate`; do not
 * fake it with a fixed key.
 *
 * Memory: a key with nothing active and nothing pending is forgotten at once, so `size`
 * counts only keys in use and an unbounded key space (request ids, user ids) does not grow
 * the map forever. Same conventions as `Gate`: FIFO per key, `signal` aborts a wait with
 * `signal.reason`, `cap <= 0` or `Infinity` is unlimited, release is idempotent.
 */
export class KeyedGate<K = string> {
  readonly #cap: number;
  readonly #gates = new Map<K, Gate>();

  constructor(cap: number) {
    this.#cap = toCapacity(cap, 'cap');
  }

  /** Keys with at least one slot held or one caller waiting. */
  get size(): number {
    return this.#gates.size;
  }

  /** Slots held under `key`. */
  activeCount(key: K): number {
    return this.#gates.get(key)?.activeCount ?? 0;
  }

  /** Callers waiting under `key`. */
  pendingCount(key: K): number {
    return this.#gates.get(key)?.pendingCount ?? 0;
  }

  /** Waits for a slot under `key`; see {@link Gate.acquire}. */
  acquire(key: K, options?: AcquireOptions): Promise<Release> {
    const signal = options?.signal;
    // Checked here too so an aborted call never creates an entry for its key.
    if (signal?.aborted) return Promise.reject(signal.reason);
    const gate = this.#gateFor(key);
    return gate.acquire(options).then((release) => this.#forgetWhenIdle(key, gate, release));
  }

  /**
   * Takes a slot under `key` only if one is free right now; `undefined` means that key is
   * full, so a busy key can be refused (409/429) instead of queued behind itself.
   */
  tryAcquire(key: K): Release | undefined {
    const gate = this.#gateFor(key);
    const release = gate.tryAcquire();
    return release === undefined ? undefined : this.#forgetWhenIdle(key, gate, release);
  }

  /** Runs `fn` holding a slot under `key` and releases it however `fn` ends. */
  async run<T>(key: K, fn: () => T | PromiseLike<T>, options?: AcquireOptions): Promise<T> {
    const release = await this.acquire(key, options);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  #gateFor(key: K): Gate {
    let gate = this.#gates.get(key);
    if (gate === undefined) {
      gate = new Gate(this.#cap);
      this.#gates.set(key, gate);
    }
    return gate;
  }

  // A gate with no holder has no waiter either (waiters exist only while it is full), so
  // the last release is the one moment a key can become idle.
  #forgetWhenIdle(key: K, gate: Gate, release: Release): Release {
    return () => {
      release();
      if (gate.activeCount === 0 && this.#gates.get(key) === gate) this.#gates.delete(key);
    };
  }
}
