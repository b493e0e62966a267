import {
  type ActivityOptions,
  ApplicationFailure,
  condition,
  proxyActivities,
  setHandler,
  type sleep,
  TemporalFailure,
} from '@temporalio/workflow';
import { SideEffectFailureType } from './failures.js';
import {
  type EffectRequest,
  type EffectResponse,
  type EnsureReconcileRequest,
  type EnsureReconcileResponse,
  type Reconciled,
  reconciledSignal,
  type UncertainDetails,
  type Verdict,
} from './protocol.js';

/** A duration as Temporal takes it: milliseconds or an `ms`-style string like `'1 hour'`. */
type Duration = Parameters<typeof sleep>[0];

/** Per-call options of {@link sideEffect}: where the key comes from, what to do when the outcome is uncertain, and the effect activity's own options. */
export interface SideEffectOptions extends ActivityOptions {
  /**
   * Names this call inside the workflow; the key is `<workflowId>/<step>`.
   * Default: the effect's name. Two calls with the same step are ONE action:
   * the second replays the first (with another input it fails with
   * `SideEffectKeyConflict`). Give each distinct action its own step.
   * The workflow id survives resets and continue-as-new, so does the key: a
   * new run calling the same step replays the old run's result.
   */
  step?: string;
  /** Replaces `<workflowId>/<step>` as the idempotency key, e.g. `charge/<orderId>` to deduplicate across workflows. */
  key?: string;
  /**
   * `wait` (default): block until a ReconcileWorkflow decides, then return the
   * recorded result or run the effect again. `throw`: fail at once with a
   * non-retryable `SideEffectOutcomeUncertain` (the key stays blocked).
   */
  onUncertain?: 'wait' | 'throw';
  /**
   * While waiting, how often to re-ask the store and re-subscribe, in case the
   * ReconcileWorkflow was terminated or its signal never arrived. Default 1 hour.
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
  startToCloseTimeout: '5 minutes',
  // Must stay above the lease TTL / 2: the activity heartbeats every TTL/3 while apply runs.
  heartbeatTimeout: '1 minute',
};

const reconcileActivities = proxyActivities<{
  ensureReconcile(request: EnsureReconcileRequest): Promise<EnsureReconcileResponse>;
}>({ startToCloseTimeout: '1 minute' });

/** Verdicts delivered by `reconciled` signals, by key: several waiting calls in one workflow never take each other's. */
const verdicts = new Map<string, Verdict>();
let listening = false;

function listen(): void {
  if (listening) return;
  listening = true;
  setHandler(reconciledSignal, ({ key, applied, result }: Reconciled) => {
    verdicts.set(key, applied ? { applied, result } : { applied });
  });
}

/**
 * Runs a registered effect at most once and returns its result. Retries,
 * worker crashes and workflow resets all land on the same key, so the effect
 * is applied once and later calls get the recorded result. When the outcome is
 * uncertain, it waits for the key's ReconcileWorkflow (probe or person) instead
 * of guessing: applied -> the recorded result, never re-applied; not applied ->
 * the effect runs again.
 */
export async function sideEffect<R = unknown, I = unknown>(
  effect: string,
  input: I,
  options: SideEffectOptions = {},
): Promise<R> {
  return (await runSideEffect<R, I>(effect, input, options)).result;
}

/** {@link sideEffect}, also telling whether this call applied, replayed or waited for a reconcile. */
export async function runSideEffect<R = unknown, I = unknown>(
  effect: string,
  input: I,
  options: SideEffectOptions = {},
): Promise<SideEffectOutcome<R>> {
  const { step = effect, key, onUncertain = 'wait', recheckEvery = '1 hour', ...rest } = options;
  const activity = proxyActivities<
    Record<string, (request: EffectRequest<I>) => Promise<EffectResponse<R>>>
  >({
    ...defaultEffectOptions,
    ...rest,
  })[effect]!;
  const request: EffectRequest<I> = key === undefined ? { step, input } : { step, input, key };
  for (;;) {
    let uncertain: UncertainDetails;
    try {
      return await activity(request);
    } catch (error) {
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
 * A typed facade over {@link sideEffect}, like `proxyActivities`:
 * `const { charge } = proxySideEffects<typeof effects>({ heartbeatTimeout: '30s' })`
 * with `import type` of the host's effects.
 */
export function proxySideEffects<E>(defaults: SideEffectOptions = {}): SideEffectsFor<E> {
  return new Proxy({} as SideEffectsFor<E>, {
    get: (_, effect) => {
      if (typeof effect !== 'string') return undefined;
      return (input: unknown, options: SideEffectOptions = {}) =>
        sideEffect(effect, input, { ...defaults, ...options });
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

async function awaitVerdict(
  request: EnsureReconcileRequest,
  recheckEvery: Duration,
): Promise<Verdict> {
  listen();
  // A verdict left by an earlier round (say the store answered first) must not decide this one.
  verdicts.delete(request.key);
  for (;;) {
    const { verdict } = await reconcileActivities.ensureReconcile(request);
    if (verdict) return verdict;
    if (await condition(() => verdicts.has(request.key), recheckEvery)) {
      const delivered = verdicts.get(request.key)!;
      verdicts.delete(request.key);
      return delivered;
    }
  }
}
