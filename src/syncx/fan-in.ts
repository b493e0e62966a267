import { capturePanic } from './panic.js';
import { toCapacity, toCount } from './validate.js';

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
