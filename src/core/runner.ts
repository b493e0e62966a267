import {
  ContendedError,
  FenceStaleError,
  isNotApplied,
  LeaseLostError,
  NoStoreError,
  NotAppliedError,
  NotTransactionalError,
  OutcomeUncertainError,
  UnexpectedStoreAnswerError,
} from './errors.js';
import { KeepAlive } from './keep-alive.js';
import { maskConnectionString } from './mask.js';
import {
  isTransactionalStore,
  type Store,
  type TransactionContext,
  type TransactionOptions,
} from './store.js';
import type { Action, KeyEvent, Lease, Result } from './types.js';
import { checkAction, checkResolution, checkTtl } from './validate.js';
import type { Resolution, ResolveOutcome } from './verdict.js';

/** What apply gets: the lease whose fence goes to every downstream write, and a signal that fires when the lease is lost or the caller gives up. */
export interface ApplyContext {
  lease: Lease;
  signal: AbortSignal;
}

/** Applies the side effect. Pass `lease.fence` to the downstream. */
export type Apply = (context: ApplyContext) => Promise<Result>;

/**
 * A side effect in two phases. Prepare may be slow and must not touch the
 * outside world; the Runner re-checks the lease between the two, because a
 * prepare that outlived the TTL would otherwise apply beside the next holder.
 */
export interface Effect<Prepared> {
  prepare: (context: { signal: AbortSignal }) => Promise<Prepared>;
  apply: (prepared: Prepared, context: ApplyContext) => Promise<Result>;
}

/** Per-call options. */
export interface ExecuteOptions {
  /**
   * Aborts the apply (for example when Temporal cancels the activity).
   * @default none: only a lost lease aborts
   */
  signal?: AbortSignal;
  /**
   * Called after each successful lease renewal during apply (for example to heartbeat).
   * @default none
   */
  onRenewed?: (lease: Lease) => void;
  /**
   * Which apply errors are definite refusals (nothing took effect), besides
   * `NotAppliedError`: those release the key and end as `failed` with
   * `definite: true` instead of blocking it as uncertain.
   * @default none: only `NotAppliedError` is definite
   */
  isDefinite?: (error: unknown) => boolean;
  /**
   * The breaker of the attempt's provider: asked once the lease is granted, before prepare and
   * apply, and told how an attempt it let through ended. Never asked for a replay or an uncertain
   * key: those answer as the store says.
   * @default none: every grant goes on
   */
  breaker?: AttemptBreaker;
  /**
   * Asked once the lease is granted, before prepare and apply; throwing refuses the attempt.
   * @default none: every grant goes on
   * @deprecated since 0.4.0, removed in 0.5.0: use {@link ExecuteOptions.breaker} (`admit` is its
   * first half).
   */
  admit?: (lease: Lease) => void | Promise<void>;
}

/**
 * A breaker as one call's attempt meets it, a step of {@link Runner.execute}: the Runner asks it
 * between the grant and the apply, and tells it the attempt's end, on every path out. Threaded
 * through the caller instead, the outcome was the caller's to remember, and a path that forgot it
 * left a half-open breaker waiting out its slot.
 */
export interface AttemptBreaker {
  /**
   * Whether this granted attempt may start. Throwing refuses it: the key is released (back to
   * `free`, nothing applied) and the call ends `failed` with that error. Answer at once (no
   * promise) when nothing needs asking: the closed path then adds no turn of the event loop.
   */
  admit(lease: Lease): void | Promise<void>;
  /**
   * How the admitted attempt ended, before execute returns. The execution stands whatever this
   * does: a throw is ignored, so report your own failures.
   */
  record(execution: Execution): void | Promise<void>;
}

/**
 * How one execute ended. The outcome is always a value, never hidden in an
 * exception, because the caller's next step differs for each:
 * - `applied`: this call applied it and the result is recorded;
 * - `replayed`: done earlier, here is the stored result;
 * - `contended`: someone else holds the resource, nothing ran; retry later;
 * - `uncertain`: it may have taken effect; the key is blocked until resolved. Also after
 *   three attempts in a row failed without applying since a
 *   "not applied" verdict: the verdict may be wrong, and a person judges again;
 * - `failed`: granted but not applied (prepare failed, an apply declared
 *   safe failed, or a FencedSink rolled the write back before COMMIT);
 *   nothing recorded, safe to retry. `definite` when apply
 *   reported a refusal (`NotAppliedError` or `isDefinite`): the key is free
 *   again, and retrying the same input is likely to be refused again.
 */
export type Execution =
  | { outcome: 'applied'; result: Result; lease: Lease }
  | { outcome: 'replayed'; result: Result }
  | { outcome: 'contended'; retryAfterMs: number; error?: LeaseLostError }
  | { outcome: 'uncertain'; reason: string; error: OutcomeUncertainError }
  | { outcome: 'failed'; error: unknown; definite?: true };

/**
 * Fixes the order acquire -> prepare -> holder check -> apply -> complete or
 * markUncertain -> release in one place. Each host writing it by hand is how
 * a step gets skipped: completing without the fence, retrying an apply whose
 * effect may have landed, or applying after the lease moved on.
 *
 * @example
 * ```ts
 * const runner = new Runner(new PgStore({ pool }), { ttlMs: 30_000 });
 * const execution = await runner.execute(
 *   { key: 'order-42/charge', resource: 'card-7', payload: encodeJson({ cents: 500 }) },
 *   async ({ lease, signal }) => ({ payload: encodeJson(await charge(lease.fence, signal)) }),
 * );
 * if (execution.outcome === 'uncertain') page(execution.reason);
 * ```
 */
export class Runner {
  readonly #store: Store | undefined;
  readonly #ttlMs: number;

  /** `ttlMs` is how long one attempt may hold the resource; a business judgement, so it is required. */
  constructor(store: Store | undefined, options: { ttlMs: number }) {
    this.#store = store;
    this.#ttlMs = options.ttlMs;
  }

  /** Applies once, in one phase: two round trips (acquire straight into `applying`, complete). */
  execute(action: Action, apply: Apply, options: ExecuteOptions = {}): Promise<Execution> {
    return this.#execute(action, undefined, (_, context) => apply(context), options);
  }

  /** Prepares, re-checks the lease, then applies; a prepare that outlived its lease ends as `contended` with LeaseLostError and nothing applied. */
  executeWith<Prepared>(
    action: Action,
    effect: Effect<Prepared>,
    options: ExecuteOptions = {},
  ): Promise<Execution> {
    return this.#execute(action, effect.prepare, effect.apply, options);
  }

  /**
   * Exactly once, for an effect whose downstream is a table in the store's own
   * database: acquire, `apply`'s statements (run them on `tx`) and complete
   * commit together in one transaction, so a crash rolls all of it back and the
   * outcome is never uncertain. A throwing apply ends as `failed` with nothing
   * applied, whatever its retrySafety. Needs a TransactionalStore (PgStore),
   * else NotTransactionalError. While it runs, other acquires of the resource
   * wait for its commit (the row lock is the lease) instead of answering contended.
   */
  async executeInTransaction<Tx>(
    action: Action,
    apply: (context: TransactionContext<Tx>) => Promise<Result>,
    options: TransactionOptions = {},
  ): Promise<Execution> {
    const store = this.#requireStore();
    if (!isTransactionalStore<Tx>(store)) throw new NotTransactionalError();
    return store.executeInTransaction(checkAction(action), checkTtl(this.#ttlMs), apply, options);
  }

  /** Resolves an uncertain key: records the verdict on its attempt; first resolution wins. */
  async resolve(action: Action, resolution: Resolution): Promise<ResolveOutcome> {
    const store = this.#requireStore();
    const { key } = checkAction(action);
    return store.resolveUncertain(key, checkResolution(resolution));
  }

  /** Returns the result, or throws: anything but applied/replayed (contended included) is an error, never an empty result. */
  async run(action: Action, apply: Apply, options: ExecuteOptions = {}): Promise<Result> {
    const execution = await this.execute(action, apply, options);
    switch (execution.outcome) {
      case 'applied':
      case 'replayed':
        return execution.result;
      case 'contended':
        throw new ContendedError(action.key, action.resource, execution.retryAfterMs, {
          cause: execution.error,
        });
      case 'uncertain':
      case 'failed':
        throw execution.error;
    }
  }

  #requireStore(): Store {
    if (!this.#store) throw new NoStoreError();
    return this.#store;
  }

  async #execute<Prepared>(
    action: Action,
    prepare: Effect<Prepared>['prepare'] | undefined,
    apply: (prepared: Prepared, context: ApplyContext) => Promise<Result>,
    options: ExecuteOptions,
  ): Promise<Execution> {
    const store = this.#requireStore();
    const checked = checkAction(action);
    const ttlMs = checkTtl(this.#ttlMs);
    const acquisition = await store.acquire(checked, ttlMs, { applying: !prepare });
    switch (acquisition.outcome) {
      case 'replayed':
      case 'contended':
        return acquisition;
      case 'uncertain':
        return {
          outcome: 'uncertain',
          reason: acquisition.reason,
          error: new OutcomeUncertainError(checked.key, checked.resource, acquisition.reason),
        };
      case 'granted':
        break;
      default:
        throw new UnexpectedStoreAnswerError((acquisition as { outcome: unknown }).outcome);
    }

    const breaker =
      options.breaker ?? (options.admit && { admit: options.admit, record: () => {} });
    if (breaker) {
      try {
        const admitting = breaker.admit(acquisition.lease);
        if (admitting) await admitting;
      } catch (error) {
        await releaseQuietly(store, checked, acquisition.lease);
        return { outcome: 'failed', error };
      }
    }
    const execution = await this.#attempt(
      store,
      checked,
      acquisition.lease,
      prepare,
      apply,
      options,
    );
    if (breaker) {
      try {
        const recording = breaker.record(execution);
        if (recording) await recording;
      } catch {
        // The attempt's end stands; the breaker reports its own failure.
      }
    }
    return execution;
  }

  /** The granted, admitted attempt: prepare, the holder check, apply, complete or markUncertain. */
  async #attempt<Prepared>(
    store: Store,
    checked: Required<Action>,
    lease: Lease,
    prepare: Effect<Prepared>['prepare'] | undefined,
    apply: (prepared: Prepared, context: ApplyContext) => Promise<Result>,
    options: ExecuteOptions,
  ): Promise<Execution> {
    // Renewed from the grant on, so a slow prepare keeps its lease (and its Temporal heartbeat) too.
    const keepAlive = new KeepAlive(store, checked, lease, options.onRenewed);
    const signal = options.signal
      ? AbortSignal.any([keepAlive.signal, options.signal])
      : keepAlive.signal;
    let result: Result;
    try {
      let prepared = undefined as Prepared;
      if (prepare) {
        const ready = await this.#prepare(store, checked, keepAlive, () => prepare({ signal }));
        if ('outcome' in ready) return ready;
        prepared = ready.prepared;
      }
      try {
        result = await apply(prepared, { lease: keepAlive.lease, signal });
      } catch (error) {
        if (error instanceof NotAppliedError || options.isDefinite?.(error)) {
          await releaseQuietly(store, checked, keepAlive.lease);
          return { outcome: 'failed', error, definite: true };
        }
        // Rolled back by the sink before COMMIT: nothing took effect, so a retry is safe.
        if (checked.retrySafety === 'safe' || isNotApplied(error)) {
          const doubted = await verdictInDoubt(store, checked.key, error);
          if (doubted !== undefined)
            return markUncertain(store, checked, keepAlive.lease, doubted, error);
          await releaseQuietly(store, checked, keepAlive.lease);
          return { outcome: 'failed', error };
        }
        return markUncertain(
          store,
          checked,
          keepAlive.lease,
          `apply failed: ${describe(error)}`,
          error,
        );
      }
    } finally {
      keepAlive.stop();
    }
    return this.#record(store, checked, keepAlive.lease, result);
  }

  /**
   * Prepare, then the holder check: renew with `applying` proves the fence is
   * still ours right before the outside world is touched. A lease lost before
   * that point ends as `contended` with nothing applied.
   */
  async #prepare<Prepared>(
    store: Store,
    action: Required<Action>,
    keepAlive: KeepAlive,
    prepare: () => Promise<Prepared>,
  ): Promise<{ prepared: Prepared } | Execution> {
    const lost = (cause: unknown): Execution => ({
      outcome: 'contended',
      retryAfterMs: 0,
      error: new LeaseLostError(keepAlive.lease.resource, keepAlive.lease.fence, { cause }),
    });
    let prepared: Prepared;
    try {
      prepared = await prepare();
    } catch (error) {
      await releaseQuietly(store, action, keepAlive.lease);
      return keepAlive.signal.aborted
        ? lost(keepAlive.signal.reason)
        : { outcome: 'failed', error };
    }
    try {
      keepAlive.adopt(
        await store.renew(action, keepAlive.lease, keepAlive.lease.ttlMs, { applying: true }),
      );
      return { prepared };
    } catch (error) {
      await releaseQuietly(store, action, keepAlive.lease);
      return error instanceof FenceStaleError ? lost(error) : { outcome: 'failed', error };
    }
  }

  async #record(
    store: Store,
    action: Required<Action>,
    lease: Lease,
    result: Result,
  ): Promise<Execution> {
    try {
      const recorded = await store.complete(action, lease, result);
      return { outcome: 'applied', result: recorded, lease: lease };
    } catch (error) {
      return markUncertain(store, action, lease, `complete failed: ${describe(error)}`, error);
    }
  }
}

/**
 * Blocks the key. If the mark itself fails (store down, or a takeover that
 * already concluded the key), the answer is still `uncertain`: we cannot know
 * whether the apply counted, and saying otherwise invites a duplicate.
 */
async function markUncertain(
  store: Store,
  action: Required<Action>,
  lease: Lease,
  reason: string,
  cause: unknown,
): Promise<Execution> {
  try {
    await store.markUncertain(action, lease, reason);
  } catch {
    // The key is concluded by the takeover or by sweep(); the verdict stays uncertain.
  }
  return {
    outcome: 'uncertain',
    reason,
    error: new OutcomeUncertainError(action.key, action.resource, reason, { cause }),
  };
}

/**
 * Attempts in a row that may fail without applying after a "not applied" verdict before the key
 * goes back to a person. A wrong verdict over a write that did land makes every re-run fail the
 * same way (the downstream's unique key refuses it, the sink rolls back): freed each time, the
 * key was retried without end, and being `free` it offered nobody a verdict to correct.
 */
const ATTEMPTS_AFTER_NOT_APPLIED = 3;

/**
 * The reason to hand the key back to a person instead of freeing it: this failure is the
 * `ATTEMPTS_AFTER_NOT_APPLIED`-th in a row without applying since a "not applied" verdict.
 * Undefined otherwise, and when the history cannot be read (the key is then freed, as before).
 */
async function verdictInDoubt(
  store: Store,
  key: string,
  error: unknown,
): Promise<string | undefined> {
  let events: KeyEvent[];
  try {
    events = await store.events(key);
  } catch {
    return undefined;
  }
  // This attempt is the last grant; each earlier one that ended freed failed without applying.
  let failed = 1;
  for (let index = events.length - 1; index >= 0; index -= 1) {
    const { from, to, by, reason } = events[index]!;
    if (to !== 'free') {
      if (to === 'applying' || to === 'held') continue;
      return undefined;
    }
    if (from !== 'uncertain') {
      failed += 1;
      continue;
    }
    if (failed < ATTEMPTS_AFTER_NOT_APPLIED) return undefined;
    return `apply failed ${failed} times in a row without applying since the verdict "not applied" by ${by} (${reason}), which may be wrong: ${describe(error)}`;
  }
  return undefined;
}

/** Release is a courtesy that saves waiting for the TTL; its failure must not change the verdict. */
async function releaseQuietly(store: Store, action: Action, lease: Lease): Promise<void> {
  try {
    await store.release(action, lease);
  } catch {
    // The lease expires on its own; sweep() or the next acquire concludes the key.
  }
}

/**
 * Error messages become stored reasons, so they are masked (a driver error may carry a connection
 * string with its password), cut to size and cleaned of what a store cannot hold.
 */
function describe(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return maskConnectionString(message.replaceAll('\0', '')).slice(0, 1000).toWellFormed();
}
