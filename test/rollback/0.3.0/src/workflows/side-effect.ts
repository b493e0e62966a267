import {
  ActivityCancellationType,
  type ActivityOptions,
  ApplicationFailure,
  condition,
  log,
  proxyActivities,
  setHandler,
  sleep,
  TemporalFailure,
  workflowInfo,
} from '@temporalio/workflow';
import { parseDuration } from '../protocol/duration.js';
import { SideEffectFailureType } from '../protocol/failures.js';
import { reconciledError } from '../protocol/signal-input.js';
import {
  DEFAULT_EFFECT_TIMEOUT_MS,
  type EffectRequest,
  type EffectResponse,
  type EnsureReconcileRequest,
  type EnsureReconcileResponse,
  legacyActivityNames,
  libraryActivityNames,
  type Reconciled,
  reconciledSignal,
  type UncertainDetails,
  type Verdict,
} from '../protocol/wire.js';
import { takePatch } from './patch.js';

/** A duration as Temporal takes it: milliseconds or an `ms`-style string like `'1 hour'`. */
type Duration = Parameters<typeof sleep>[0];

/** Per-call options of a guarded call ({@link proxySideEffects}, {@link runSideEffect}, {@link sideEffects}): where the key comes from, what to do when the outcome is uncertain, and the effect activity's own options. */
export interface SideEffectOptions extends ActivityOptions {
  /**
   * Names this call inside the workflow; the key is `<workflowId>/<step>`.
   * Two calls with the same step are ONE action:
   * the second replays the first (with another input it fails with
   * `SideEffectKeyConflict`). Give each distinct action its own step.
   * The workflow id survives resets and continue-as-new, so does the key: a
   * new run calling the same step replays the old run's result.
   * @default the effect's name
   */
  step?: string;
  /**
   * Replaces `<workflowId>/<step>` as the idempotency key, e.g. `charge/<orderId>` to
   * deduplicate across workflows.
   * @default `<workflowId>/<step>`
   */
  key?: string;
  /**
   * `wait`: block until a ReconcileWorkflow decides, then return the
   * recorded result or run the effect again. `throw`: fail at once with a
   * non-retryable `SideEffectOutcomeUncertain` (the key stays blocked).
   * @default 'wait'
   */
  onUncertain?: 'wait' | 'throw';
  /**
   * While waiting, when to first re-ask the store, in case the ReconcileWorkflow was
   * terminated or its signal never arrived (it subscribes again only then). Each later
   * recheck waits twice as long, up to once a day, so a wait of months adds a bounded
   * number of events per day to this workflow's history.
   * @default '1 hour'
   */
  recheckEvery?: Duration;
}

/** How a guarded call ended, for workflows that log or branch on it. `reconciled` = decided by a ReconcileWorkflow (probe or person). */
export interface SideEffectOutcome<R> {
  outcome: 'applied' | 'replayed' | 'reconciled';
  result: R;
  key: string;
}

/** Structural view of an effect definition, so workflows can type calls with a type-only import of the host's effects. */
export interface EffectShape {
  // biome-ignore lint/suspicious/noExplicitAny: bivariant input position, like Temporal's ActivityInterfaceFor
  apply(input: any, ...rest: never[]): Promise<unknown>;
}

/**
 * The names in `E` (`typeof effects`, or an interface of `apply` shapes) that are effects. A
 * function-valued property is not one, though every function has an `apply`.
 */
export type EffectName<E> = {
  [K in keyof E & string]: E[K] extends (...args: never[]) => unknown
    ? never
    : E[K] extends EffectShape
      ? K
      : never;
}[keyof E & string];

/** The input an effect's `apply` takes. */
export type EffectInput<T> = T extends EffectShape ? Parameters<T['apply']>[0] : never;

/** What an effect's `apply` resolves to. */
export type EffectResult<T> = T extends EffectShape ? Awaited<ReturnType<T['apply']>> : never;

/** The arguments of a typed call by name ({@link runSideEffect}): an effect of `E`, its input, options. */
type SideEffectArgs<E> = {
  [K in EffectName<E>]: [effect: K, input: EffectInput<E[K]>, options?: SideEffectOptions];
}[EffectName<E>];

/**
 * `unknown` for a result type, `never` for a registry of effects: the untyped overloads take a
 * result type where the typed ones take `typeof effects`, so a typed call with a misspelled name
 * or a wrong input fails there too instead of falling back to the untyped form.
 */
export type UntypedOnly<R> = 0 extends 1 & R
  ? unknown
  : R extends object
    ? [EffectName<R>] extends [never]
      ? unknown
      : never
    : unknown;

/** The typed facade returned by {@link proxySideEffects}. */
export type SideEffectsFor<E> = {
  [K in keyof E & string]: E[K] extends EffectShape
    ? (
        input: Parameters<E[K]['apply']>[0],
        options?: SideEffectOptions,
      ) => Promise<Awaited<ReturnType<E[K]['apply']>>>
    : never;
};

const defaultEffectOptions: ActivityOptions = {
  startToCloseTimeout: DEFAULT_EFFECT_TIMEOUT_MS,
  // Must stay above the lease TTL / 2: the activity heartbeats every TTL/3 while apply runs.
  heartbeatTimeout: '1 minute',
};

const reconcileActivities = proxyActivities<
  Record<string, (request: EnsureReconcileRequest) => Promise<EnsureReconcileResponse>>
>({ startToCloseTimeout: '1 minute' });

type InspectKey = (key: string) => Promise<Verdict | null>;
const storeActivities = proxyActivities<Record<string, InspectKey>>({
  startToCloseTimeout: '1 minute',
});

/** Rechecks never space out beyond this (unless `recheckEvery` itself is longer). */
const MAX_RECHECK_MS = 24 * 60 * 60 * 1000;

/**
 * Verdicts delivered by `reconciled` signals, by key: several waiting calls in one workflow never
 * take each other's. With the run the signal named, if any.
 */
const verdicts = new Map<string, Verdict & { runId?: string }>();
let listening = false;

const RECONCILED_SIGNAL_DESCRIPTION =
  'Internal, not for people: sent by the ReconcileWorkflow when the key is decided. Only a prompt: the verdict is read from the store, a malformed one is logged and ignored.';

function listen(): void {
  if (listening) return;
  listening = true;
  setHandler(
    reconciledSignal,
    (raw: unknown) => {
      const error = reconciledError(raw);
      if (error) {
        log.warn('reconciled signal refused', { error });
        return;
      }
      const { key, applied, result, runId } = raw as Reconciled;
      verdicts.set(key, {
        ...(applied ? { applied, result } : { applied }),
        ...(runId === undefined ? {} : { runId }),
      });
    },
    { description: RECONCILED_SIGNAL_DESCRIPTION },
  );
}

/**
 * A guarded call by name, resolving to its result.
 *
 * @deprecated since 0.2.0, removed in 0.3.0: use {@link proxySideEffects}:
 * `proxySideEffects<typeof effects>().charge(input, { step })` is the same call, typed per effect
 * (for a name chosen at run time, `(await runSideEffect(name, input)).result`).
 */
export function sideEffect<E>(...call: SideEffectArgs<E>): Promise<EffectResult<E[EffectName<E>]>>;
/** @deprecated since 0.2.0, removed in 0.3.0: use {@link proxySideEffects}. */
export function sideEffect<R = unknown, I = unknown>(
  effect: string & UntypedOnly<R>,
  input: I,
  options?: SideEffectOptions,
): Promise<R>;
export function sideEffect(
  effect: string,
  input: unknown,
  options: SideEffectOptions = {},
): Promise<unknown> {
  return resultOf(effect, input, options);
}

/** A guarded call's result alone (as `sideEffect` did in 0.1, tick for tick, so replays match). */
async function resultOf(
  effect: string,
  input: unknown,
  options: SideEffectOptions,
): Promise<unknown> {
  return (await guardedCall(effect, input, options)).result;
}

/**
 * The guarded call of {@link proxySideEffects}, resolving to how it ended as well as its result:
 * `applied` (this call ran the effect), `replayed` (the key was already done) or `reconciled`
 * (it waited for a probe or a person), and the key. For a workflow that logs, counts or branches
 * on that; when only the result matters, call the effect through {@link proxySideEffects}.
 * With `typeof effects` as its type argument, the name and the input are checked at compile time.
 *
 * @example
 * ```ts
 * import type { effects } from './effects.js';
 * const { outcome, key } = await runSideEffect<typeof effects>('charge', { card, cents });
 * if (outcome === 'reconciled') log.info('charge decided by a reconcile', { key });
 * ```
 */
export function runSideEffect<E>(
  ...call: SideEffectArgs<E>
): Promise<SideEffectOutcome<EffectResult<E[EffectName<E>]>>>;
export function runSideEffect<R = unknown, I = unknown>(
  effect: string & UntypedOnly<R>,
  input: I,
  options?: SideEffectOptions,
): Promise<SideEffectOutcome<R>>;
export function runSideEffect(
  effect: string,
  input: unknown,
  options: SideEffectOptions = {},
): Promise<SideEffectOutcome<unknown>> {
  return guardedCall(effect, input, options);
}

/**
 * Runs a registered effect at most once. Retries, worker crashes and workflow resets all land on
 * the same key, so the effect is applied once and later calls get the recorded result. When the
 * outcome is uncertain, it waits for the key's ReconcileWorkflow (probe or person) instead of
 * guessing: applied -> the recorded result, never re-applied; not applied -> the effect runs again.
 */
export async function guardedCall<R = unknown, I = unknown>(
  effect: string,
  input: I,
  options: SideEffectOptions = {},
): Promise<SideEffectOutcome<R>> {
  const { step = effect, key, onUncertain = 'wait', recheckEvery = '1 hour', ...rest } = options;
  const cancellation: ActivityOptions = takePatch('effectWaitCancellation')
    ? { cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED }
    : {};
  const activity = proxyActivities<
    Record<string, (request: EffectRequest<I>) => Promise<EffectResponse<R>>>
  >({
    ...defaultEffectOptions,
    ...cancellation,
    ...rest,
  })[effect]!;
  const request: EffectRequest<I> = key === undefined ? { step, input } : { step, input, key };
  for (;;) {
    let uncertain: UncertainDetails;
    try {
      return await activity(request);
    } catch (error) {
      const pause = pausedDetails(error);
      // Nothing was attempted: the breaker decides when to try again, not the retry budget.
      if (pause && takePatch('breakerPausedWait')) {
        log.info('effect paused by its breaker: waiting for the next half-open', { ...pause });
        await sleep(Math.max(1_000, pause.retryAfterMs));
        continue;
      }
      const details = uncertainDetails(error);
      if (!details) throw error;
      uncertain = details;
    }
    if (onUncertain === 'throw') {
      throw ApplicationFailure.create({
        type: SideEffectFailureType.OutcomeUncertain,
        message: `outcome of "${uncertain.key}" is uncertain (${uncertain.reason}): reconcile before retrying`,
        nonRetryable: true,
        details: [uncertain],
      });
    }
    const verdict = await awaitVerdict({ ...uncertain, effect, input }, recheckEvery);
    if (verdict.applied)
      return { outcome: 'reconciled', result: verdict.result as R, key: uncertain.key };
    // Not applied: run the effect again. The store gates the re-run, so a wrong verdict cannot double-apply a done key.
  }
}

/**
 * The way to call effects from a workflow, like `proxyActivities`: each property runs the effect
 * of that name at most once and resolves to its result, with input and result types taken from
 * its definition through a type-only import, so nothing of the worker side enters the bundle.
 * {@link runSideEffect} also tells how a call ended; {@link sideEffects} fans many out.
 *
 * @example
 * ```ts
 * import { proxySideEffects } from 'sideeffect/workflows';
 * import type { effects } from './effects.js';
 *
 * const { charge } = proxySideEffects<typeof effects>({ heartbeatTimeout: '30s' });
 * export async function order(input: { card: string; cents: number }) {
 *   return (await charge(input)).chargeId; // key <workflowId>/charge
 * }
 * ```
 */
export function proxySideEffects<E>(defaults: SideEffectOptions = {}): SideEffectsFor<E> {
  return new Proxy({} as SideEffectsFor<E>, {
    get: (_, effect) => {
      if (typeof effect !== 'string') return undefined;
      return (input: unknown, options: SideEffectOptions = {}) =>
        resultOf(effect, input, { ...defaults, ...options });
    },
  });
}

/** The `{ key, resource, reason }` of a SideEffectOutcomeUncertain failure anywhere in the cause chain, else undefined. */
function uncertainDetails(error: unknown): UncertainDetails | undefined {
  for (let e: unknown = error; e instanceof TemporalFailure; e = e.cause) {
    if (e instanceof ApplicationFailure && e.type === SideEffectFailureType.OutcomeUncertain) {
      return e.details?.[0] as UncertainDetails;
    }
  }
  return undefined;
}

/** The `{ group, retryAfterMs, ... }` of a SideEffectPaused failure anywhere in the cause chain, else undefined. */
function pausedDetails(
  error: unknown,
): { key: string; group: string; retryAfterMs: number } | undefined {
  for (let e: unknown = error; e instanceof TemporalFailure; e = e.cause) {
    if (e instanceof ApplicationFailure && e.type === SideEffectFailureType.Paused) {
      const details = e.details?.[0] as { key?: unknown; group?: unknown; retryAfterMs?: unknown };
      const wait = Number(details?.retryAfterMs);
      return {
        key: String(details?.key),
        group: String(details?.group),
        retryAfterMs: Number.isFinite(wait) ? wait : 60_000,
      };
    }
  }
  return undefined;
}

async function awaitVerdict(
  request: EnsureReconcileRequest,
  recheckEvery: Duration,
): Promise<Verdict> {
  listen();
  // A verdict left by an earlier round (say the store answered first) must not decide this one.
  verdicts.delete(request.key);
  const delivered = (): (Verdict & { runId?: string }) | undefined => {
    const verdict = verdicts.get(request.key);
    verdicts.delete(request.key);
    return verdict;
  };
  const names = takePatch('namespacedActivities') ? libraryActivityNames : legacyActivityNames;
  const ensureReconcile = reconcileActivities[names.ensureReconcile]!;
  const first = await ensureReconcile(request);
  if (first.verdict) return first.verdict;
  let wait: Duration = recheckEvery;
  for (;;) {
    if (await condition(() => verdicts.has(request.key), wait)) {
      const { runId, ...signalled } = delivered()!;
      // A run held to 0.1's commands trusts, as 0.1.0 did, only a signal naming this run (as the
      // library's reconciles do): 0.1.0 returned any, so refusing one cannot replay there, and a
      // signal that does not name it is checked against the store all the same.
      const readsStore =
        runId === workflowInfo().runId
          ? takePatch('reconciledReadsStore')
          : takePatch('reconciledReadsStore', { evenIfHeld: true });
      if (!readsStore) return signalled;
      const stored = await (storeActivities[names.inspectKey] as InspectKey)(request.key);
      if (stored) return stored;
      log.warn('reconciled signal, but the store still holds the key uncertain: still waiting', {
        key: request.key,
      });
      continue;
    }
    const backoff = takePatch('recheckBackoff');
    const { verdict } = await ensureReconcile(backoff ? { ...request, recheck: true } : request);
    if (verdict) return verdict;
    if (backoff) wait = nextRecheck(wait, recheckEvery);
  }
}

/** Twice the last wait, capped at a day (or at `recheckEvery` if that is longer); unchanged if the duration cannot be read. */
function nextRecheck(last: Duration, recheckEvery: Duration): Duration {
  const lastMs = parseDuration(last);
  const firstMs = parseDuration(recheckEvery);
  if (lastMs === undefined || firstMs === undefined) return last;
  return Math.min(2 * lastMs, Math.max(firstMs, MAX_RECHECK_MS));
}
