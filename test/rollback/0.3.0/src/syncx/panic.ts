/**
 * What a fan-in slot holds when its task threw something that is not an `Error`
 * (`throw 'x'`, `throw 42`, `Promise.reject(undefined)`).
 *
 * Why: a bare string or `undefined` has no stack and no type to match on, so it is easy to
 * log as "undefined" and lose. Wrapping it gives a stack (taken where syncx caught it),
 * an `instanceof` check, and keeps the original thrown value in `value`.
 */
export class PanicError extends Error {
  override readonly name = 'PanicError';
  /** The value that was thrown, untouched. */
  readonly value: unknown;

  constructor(value: unknown) {
    super(`task threw a non-Error value: ${describe(value)}`);
    this.value = value;
  }
}

/** Receives every {@link PanicError} a fan-in creates, before it lands in its slot. */
export type PanicHandler = (error: PanicError) => void;

const logPanic: PanicHandler = (error) => console.error('syncx:', error);
let handler: PanicHandler = logPanic;

/**
 * Installs the module-wide hook that is told about every {@link PanicError}; `undefined`
 * restores the default, which logs with `console.error` (fine inside a Temporal workflow,
 * whose console is replay-aware). Returns the previous hook so callers can put it back.
 *
 * Why: a non-Error throw is a bug in the task, not an expected failure; the slot carries it
 * for the caller, and the hook gets it to whoever watches for bugs (logs, metrics), so it is
 * never swallowed by a caller that only counts failures.
 */
export function onPanic(next: PanicHandler | undefined): PanicHandler {
  const previous = handler;
  handler = next ?? logPanic;
  return previous;
}

/**
 * The 0.1 name of {@link onPanic}.
 * @deprecated since 0.2.0, removed in 0.3.0: use {@link onPanic}.
 */
export function setPanicHandler(next: PanicHandler | undefined): PanicHandler {
  return onPanic(next);
}

/** Passes `Error`s through and wraps and reports anything else. */
export function capturePanic(thrown: unknown): unknown {
  if (isError(thrown)) return thrown;
  const panic = new PanicError(thrown);
  try {
    handler(panic);
  } catch {
    // A broken hook must not turn one slot's failure into a rejected fan-in.
  }
  return panic;
}

// The tag check recognises errors made in another realm (vm contexts, the workflow sandbox).
function isError(value: unknown): boolean {
  return value instanceof Error || Object.prototype.toString.call(value) === '[object Error]';
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}
