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
import { InvalidActionError } from '../core/errors.js';
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
import { nextPause, type PauseLimits, pauseLimits } from './paused-wait.js';

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
  /**
   * While the effect's breaker keeps the call paused, the longest wait between two turns (each
   * turn one activity and one timer in this workflow's history): waits start at the breaker's
   * hint and double up to this, so a pause of days adds a few events an hour instead of a turn
   * per cool-down. A breaker that closes is seen at the next turn, so this is also the most a
   * caller waits after it closes. Refused at definition unless a positive duration.
   * @default '1 hour'
   */
  pauseCap?: Duration;
  /**
   * The longest total pause: once the call has been paused this long, it fails with a
   * non-retryable `SideEffectPaused` (details `{ key, group, pausedMs, turns }`) the workflow can
   * catch, e.g. to cancel the order instead of holding it for the provider's whole outage.
   * Nothing was attempted: the key is free. Refused at definition unless a positive duration.
   * @default no limit: the call waits for the breaker however long it stays open
   */
  maxPause?: Duration;
}

/** How a guarded call ended, for workflows that log or branch on it. `reconciled` = decided by a ReconcileWorkflow (probe or person). */
export interface SideEffectOutcome<R> {
  outcome: 'applied' | 'replayed' | 'reconciled';
  result: R;
  key: string;
}

/** Structural view of an effect definition, so workflows can type calls with a type-only import of the host's effects. */
interface EffectShape {
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
  const {
    step = effect,
    key,
    onUncertain = 'wait',
    recheckEvery = '1 hour',
    pauseCap,
    maxPause,
    ...rest
  } = options;
  const limits = callPauseLimits({ pauseCap, maxPause });
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
  let paused: Paused | undefined;
  for (;;) {
    let uncertain: UncertainDetails;
    try {
      return await activity(request);
    } catch (error) {
      const pause = pausedDetails(error);
      // Nothing was attempted: the breaker decides when to try again, not the retry budget.
      if (pause && takePatch('breakerPausedWait')) {
        if (takePatch('breakerPausedBackoff')) {
          paused = await waitPaused(pause, paused, limits);
          continue;
        }
        log.info('effect paused by its breaker: waiting for the next half-open', { ...pause });
        await sleep(Math.max(1_000, pause.retryAfterMs));
        continue;
      }
      const details = uncertainDetails(error);
      if (!details) throw error;
      uncertain = details;
      paused = undefined;
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
 * A `pauseCap` or `maxPause` in `defaults` that is not a positive duration throws an
 * `InvalidActionError` naming it here, not on the first pause.
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
  pauseLimits(defaults);
  return new Proxy({} as SideEffectsFor<E>, {
    get: (_, effect) => {
      if (typeof effect !== 'string') return undefined;
      return (input: unknown, options: SideEffectOptions = {}) =>
        resultOf(effect, input, { ...defaults, ...options });
    },
  });
}

/** A call's pause so far: since when (workflow time), its turns, and the last wait. */
interface Paused {
  since: number;
  turns: number;
  lastMs: number;
}

/**
 * One turn of a paused call: fails it with a non-retryable `SideEffectPaused` once `maxPause` is
 * spent, else sleeps the next wait (never past `maxPause`, so the last turn comes when it ends).
 */
async function waitPaused(
  pause: { key: string; group: string; retryAfterMs: number },
  paused: Paused | undefined,
  { capMs, maxPauseMs }: PauseLimits,
): Promise<Paused> {
  const since = paused?.since ?? Date.now();
  const turns = (paused?.turns ?? 0) + 1;
  const pausedMs = Date.now() - since;
  if (maxPauseMs !== undefined && pausedMs >= maxPauseMs) {
    throw ApplicationFailure.create({
      type: SideEffectFailureType.Paused,
      message: `effect paused by breaker "${pause.group}" for ${pausedMs} ms over ${turns} turns, past its maxPause of ${maxPauseMs} ms: nothing was attempted, the key "${pause.key}" is free`,
      nonRetryable: true,
      details: [{ key: pause.key, group: pause.group, pausedMs, turns }],
    });
  }
  let wait = nextPause(paused?.lastMs, pause.retryAfterMs, capMs);
  if (maxPauseMs !== undefined) wait = Math.min(wait, maxPauseMs - pausedMs);
  log.info('effect paused by its breaker: waiting', { ...pause, waitMs: wait, turns, pausedMs });
  await sleep(wait);
  return { since, turns, lastMs: wait };
}

/** A call's pause options, a bad one failing the call (not the workflow task) with `SideEffectInvalidAction`. */
function callPauseLimits(options: { pauseCap?: Duration; maxPause?: Duration }): PauseLimits {
  try {
    return pauseLimits(options);
  } catch (error) {
    if (!(error instanceof InvalidActionError)) throw error;
    throw ApplicationFailure.create({
      type: SideEffectFailureType.InvalidAction,
      message: error.message,
      nonRetryable: true,
      details: [{ field: error.field }],
    });
  }
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
