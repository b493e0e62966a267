import { capturePanic } from './panic.js';
import { toCapacity, toCount } from './validate.js';

/**
 * Runs `fn(0) … fn(n - 1)` all at once and resolves, once every call has settled, to one
 * `PromiseSettledResult` per index, in index order.
 *
 * Why: `Promise.all` drops every result after the first failure, and hand-written
 * "write results by index" fan-outs tend to lose panics. Here every slot is kept, a thrown
 * non-Error becomes a {@link PanicError} in its slot (and goes to the panic hook), a
 * synchronous throw counts like a rejection, and the returned promise never rejects.
 * `n <= 0` resolves to `[]`.
 * @deprecated since 0.2.0, removed in 0.3.0: use `settleAll(n, fn)`.
 */
export function fanInErr<T>(
  n: number,
  fn: (i: number) => T | PromiseLike<T>,
): Promise<PromiseSettledResult<T>[]> {
  return fanIn(toCount(n), Number.POSITIVE_INFINITY, undefined, fn);
}

/**
 * {@link fanInErr} with at most `min(limit, n)` calls in flight: that many workers pull the
 * next index from a shared counter, so memory and pending promises stay O(limit).
 *
 * Why: a fan-out over dozens or thousands of items that each hit a database or remote API
 * must not open them all at once and overload the downstream. `limit <= 0` or `Infinity`
 * means unlimited.
 * @deprecated since 0.2.0, removed in 0.3.0: use `settleAll(n, fn, { concurrency: limit })`.
 */
export function fanInLimit<T>(
  n: number,
  limit: number,
  fn: (i: number) => T | PromiseLike<T>,
): Promise<PromiseSettledResult<T>[]> {
  return fanIn(toCount(n), toCapacity(limit, 'limit'), undefined, fn);
}

/**
 * {@link fanInLimit} that stops starting work when `signal` aborts. `fn` gets the signal
 * first, as `(signal, i)`, so each call can cancel its own I/O.
 *
 * Why: a cancelled workflow or request should not keep launching calls nobody will read,
 * yet calls already running must neither be abandoned nor have their results thrown away.
 * After the abort no new call starts; slots not yet started get
 * `{ status: 'rejected', reason: signal.reason }` and `fn` is never called for them; calls in
 * flight finish and keep their results. An already-aborted signal calls `fn` not once. A
 * call that rejects with the signal's own reason keeps it as is (cancellation is not a
 * panic, even when the reason is not an Error). Still resolves only when every slot settled.
 * @deprecated since 0.2.0, removed in 0.3.0: use
 * `settleAll(n, (i, signal) => …, { concurrency: limit, signal })`.
 */
export function fanInLimitCtx<T>(
  signal: AbortSignal,
  n: number,
  limit: number,
  fn: (signal: AbortSignal, i: number) => T | PromiseLike<T>,
): Promise<PromiseSettledResult<T>[]> {
  return fanIn(toCount(n), toCapacity(limit, 'limit'), signal, (i) => fn(signal, i));
}

/** How {@link settleAll} runs its calls. */
export interface SettleAllOptions {
  /**
   * At most this many calls in flight; that many workers pull the next index from a shared
   * counter, so memory and pending promises stay O(concurrency) and a downstream is not
   * opened thousands of times at once.
   * @default Infinity (all at once)
   */
  concurrency?: number;
  /**
   * Stops starting calls when it aborts: slots not yet started settle rejected with its reason,
   * calls in flight finish and keep their results. Each call gets it to cancel its own I/O.
   * @default none
   */
  signal?: AbortSignal;
}

/**
 * Calls `fn(0) … fn(n - 1)` and resolves, once every call has settled, to one
 * `PromiseSettledResult` per index, in index order; never rejects.
 *
 * Why: `Promise.all` drops every result after the first failure, and hand-written "write
 * results by index" fan-outs tend to lose panics. A thrown non-Error becomes a
 * {@link PanicError} in its slot (and goes to {@link onPanic}'s hook), a synchronous throw counts
 * like a rejection, and a rejection with the signal's own reason is kept as is. `n <= 0`
 * resolves to `[]`; `concurrency <= 0` means unlimited. Promises only, no timers: deterministic
 * inside a Temporal workflow.
 */
export function settleAll<T>(
  n: number,
  fn: (i: number, signal: AbortSignal | undefined) => T | PromiseLike<T>,
  options: SettleAllOptions = {},
): Promise<PromiseSettledResult<T>[]> {
  const { concurrency = Number.POSITIVE_INFINITY, signal } = options;
  return fanIn(toCount(n), toCapacity(concurrency, 'concurrency'), signal, (i) => fn(i, signal));
}

async function fanIn<T>(
  n: number,
  limit: number,
  signal: AbortSignal | undefined,
  fn: (i: number) => T | PromiseLike<T>,
): Promise<PromiseSettledResult<T>[]> {
  const results = new Array<PromiseSettledResult<T>>(n);
  let next = 0;

  // Workers pull the next index from one shared counter, so a slow call never idles the rest.
  const work = async (): Promise<void> => {
    while (next < n) {
      if (signal?.aborted) {
        // The first worker to notice settles every slot not yet started; the others find none.
        const reason: unknown = signal.reason;
        while (next < n) results[next++] = { status: 'rejected', reason };
        return;
      }
      const i = next++;
      try {
        results[i] = { status: 'fulfilled', value: await fn(i) };
      } catch (thrown) {
        const reason = signal?.aborted && thrown === signal.reason ? thrown : capturePanic(thrown);
        results[i] = { status: 'rejected', reason };
      }
    }
  };

  const workers = new Array<Promise<void>>(Math.min(limit, n));
  for (let w = 0; w < workers.length; w++) workers[w] = work();
  await Promise.all(workers);
  return results;
}
