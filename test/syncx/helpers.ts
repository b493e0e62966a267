import { getEventListeners } from 'node:events';

/** Lets every pending microtask (and the promise chains they start) run to the end. */
export function flush(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(reason: unknown): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (reason: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Observes a promise without awaiting it, so a test can ask "settled yet?" synchronously. */
export function track<T>(promise: Promise<T>): {
  readonly settled: boolean;
  readonly value: T | undefined;
  readonly reason: unknown;
} {
  const state = { settled: false, value: undefined as T | undefined, reason: undefined as unknown };
  promise.then(
    (value) => {
      state.settled = true;
      state.value = value;
    },
    (reason: unknown) => {
      state.settled = true;
      state.reason = reason;
    },
  );
  return state;
}

/** A real AbortController whose signal counts add/remove calls and reports live listeners. */
export function countingController(): {
  readonly controller: AbortController;
  readonly signal: AbortSignal;
  readonly adds: () => number;
  readonly removes: () => number;
  readonly live: () => number;
} {
  const controller = new AbortController();
  const { signal } = controller;
  let adds = 0;
  let removes = 0;
  const add = signal.addEventListener.bind(signal);
  const remove = signal.removeEventListener.bind(signal);
  signal.addEventListener = ((...args: Parameters<typeof add>) => {
    adds++;
    add(...args);
  }) as typeof signal.addEventListener;
  signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
    removes++;
    remove(...args);
  }) as typeof signal.removeEventListener;
  return {
    controller,
    signal,
    adds: () => adds,
    removes: () => removes,
    live: () => getEventListeners(signal, 'abort').length,
  };
}
