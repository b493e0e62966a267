import { toCapacity } from './validate.js';

/**
 * Gives back the slot taken by `acquire`/`tryAcquire`.
 *
 * Idempotent: a timeout path and a normal return path that both release still free exactly
 * one slot, so a double release can never lift the number in flight above the cap
 * (async-sema adds a slot per call).
 */
export type Release = () => void;

/** Options for a waiting acquire; `signal` only governs the wait, not a slot already held. */
export interface AcquireOptions {
  /**
   * Gives up waiting (the promise rejects with `signal.reason`) when it aborts.
   * @default none: waits until a slot frees
   */
  readonly signal?: AbortSignal | undefined;
}

// Takes over a freed slot. Plain waiters are their promise's own resolve function, so the
// common path allocates no wrapper.
type Waiter = (release: Release) => void;

/**
 * One shared in-flight limit: at most `cap` holders at a time, whatever they work on.
 *
 * Why: protecting a database, an external API or a pool of child processes needs a hard
 * quota on work in flight ("this process runs at most N"), not a rate limit and not a
 * worker pool that overflows into extra tasks. For a limit per key use {@link KeyedGate}.
 * Two ways in: `acquire` waits its turn in FIFO order; `tryAcquire` refuses at once when
 * full, so heavy work can answer 429/503 instead of piling up in a queue.
 *
 * `cap <= 0` or `Infinity` means unlimited. A non-integer or NaN cap throws a
 * {@link SyncxError} with code `INVALID_CAPACITY`. Uses no timers and no Node APIs, so it
 * runs unchanged inside Temporal's workflow sandbox.
 */
export class Gate {
  readonly #cap: number;
  #active = 0;
  // FIFO as an array plus a head index: Array#shift is O(n) per dequeue on long queues.
  #queue: (Waiter | undefined)[] = [];
  #head = 0;

  constructor(cap: number) {
    this.#cap = toCapacity(cap, 'cap');
  }

  /** Slots currently held. */
  get activeCount(): number {
    return this.#active;
  }

  /** Callers waiting in `acquire`. */
  get pendingCount(): number {
    return this.#queue.length - this.#head;
  }

  /**
   * Resolves to a release function once a slot is free, in FIFO order. An aborted signal
   * rejects with `signal.reason` and takes no slot: at once if it is already aborted, or by
   * leaving the queue if it aborts while waiting. The abort listener is removed as soon as
   * the wait ends either way, so a long-lived signal does not collect listeners.
   */
  acquire(options?: AcquireOptions): Promise<Release> {
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#active < this.#cap) {
      this.#active++;
      return Promise.resolve(this.#releaser());
    }
    if (signal === undefined) return new Promise(this.#enqueue);
    return new Promise((resolve, reject) => {
      const onAbort = (): void => {
        this.#leave(waiter);
        reject(signal.reason);
      };
      const waiter: Waiter = (release) => {
        signal.removeEventListener('abort', onAbort);
        resolve(release);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.#queue.push(waiter);
    });
  }

  // One shared executor instead of a closure per waiting call.
  readonly #enqueue = (resolve: Waiter): void => {
    this.#queue.push(resolve);
  };

  /** Takes a slot only if one is free right now; `undefined` means full and nothing else. */
  tryAcquire(): Release | undefined {
    if (this.#active >= this.#cap) return undefined;
    this.#active++;
    return this.#releaser();
  }

  /** Runs `fn` holding a slot and releases it however `fn` ends. */
  async run<T>(fn: () => T | PromiseLike<T>, options?: AcquireOptions): Promise<T> {
    const release = await this.acquire(options);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  #releaser(): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#free();
    };
  }

  // Hands the slot straight to the next waiter, so no newcomer can take it in between.
  #free(): void {
    if (this.#head === this.#queue.length) {
      this.#active--;
      return;
    }
    const waiter = this.#queue[this.#head]!;
    this.#queue[this.#head++] = undefined;
    this.#compact();
    waiter(this.#releaser());
  }

  #leave(waiter: Waiter): void {
    const at = this.#queue.indexOf(waiter, this.#head);
    // Not queued any more: a signal that still fires a removed listener must not drop a stranger.
    if (at < 0) return;
    if (at === this.#head) {
      this.#queue[this.#head++] = undefined;
      this.#compact();
    } else {
      this.#queue.splice(at, 1);
    }
  }

  // Drops the consumed prefix once it dominates, keeping dequeue amortised O(1) in memory too.
  #compact(): void {
    if (this.#head === this.#queue.length) {
      this.#queue.length = 0;
      this.#head = 0;
    } else if (this.#head >= 1024 && this.#head * 2 >= this.#queue.length) {
      this.#queue.copyWithin(0, this.#head);
      this.#queue.length -= this.#head;
      this.#head = 0;
    }
  }
}
