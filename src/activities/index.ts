import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import {
  InvalidActionError,
  KeyConflictError,
  NotUncertainError,
  StoreUnavailableError,
} from '../core/errors.js';
import { decodeJson, encodeJson } from '../core/json.js';
import { type ApplyContext, type ExecuteOptions, type Execution, Runner } from '../core/runner.js';
import type { Store } from '../core/store.js';
import type { Action, KeyRecord, Lease, Result, RetrySafety } from '../core/types.js';
import { checkTtl } from '../core/validate.js';
import { KeyedGate } from '../syncx/index.js';
import { SideEffectFailureType } from '../workflows/failures.js';
import {
  type EffectRequest,
  type EffectResponse,
  type EnsureReconcileRequest,
  type EnsureReconcileResponse,
  type ProbeAnswer,
  probeActivityName,
  type ReconcileInput,
  type ResolveInput,
  reconcileWorkflowId,
  type Subscription,
  subscribeSignal,
  type Verdict,
} from '../workflows/protocol.js';
import type { ReconcileWorkflow } from '../workflows/reconcile.js';

/** What an effect's apply gets: the fence for every downstream write, and a signal that fires on lease loss or activity cancellation. */
export interface EffectContext<P> {
  /** The idempotency key; pass it downstream too where the downstream deduplicates. */
  key: string;
  /** `lease.fence` goes to every FencedSink write. */
  lease: Lease;
  /** Aborted (reason LeaseLostError) when the lease is lost, or when Temporal cancels the activity. Stop writing. */
  signal: AbortSignal;
  /** What `prepare` returned (undefined without a prepare). */
  prepared: P;
}

/**
 * One side effect the host guards. `input` and the result travel as JSON
 * through Temporal and the store.
 */
export interface SideEffectDefinition<I = unknown, R = unknown, P = undefined> {
  /** What the lease makes exclusive (one live holder at a time), e.g. `account:42`. */
  resource(input: I): string;
  /**
   * Bounds this effect's attempts in flight within one worker, per key of your
   * choice (default: one bound for the effect), e.g. `{ limit: 4, key: (i) => i.model }`
   * for "at most 4 calls per LLM model". A full key fails the attempt at once with
   * the retryable `SideEffectTooManyInFlight`, before any lease is taken, so
   * Temporal backs off instead of piling attempts up in the worker.
   */
  inFlight?: { limit: number; key?: (input: I) => string };
  /** Whether a failed apply may simply be retried. Default `unknown`: a failed apply blocks the key until reconciled. */
  retrySafety?: RetrySafety;
  /** Slow work that must not touch the outside world; the lease is re-checked after it. Keep it shorter than the heartbeat timeout. */
  prepare?(input: I, context: { key: string; signal: AbortSignal }): Promise<P>;
  /** The side effect. Returns a JSON-serialisable result, recorded and replayed byte for byte. */
  apply(input: I, context: EffectContext<P>): Promise<R>;
  /**
   * Asks the downstream whether `key` took effect, so an uncertain key is
   * reconciled without a person. Answer `undefined` when it cannot tell.
   */
  probe?(input: I, context: { key: string; resource: string }): Promise<ProbeAnswer<R> | undefined>;
}

/** Any effect, as the registry holds them. */
export type AnyEffect = SideEffectDefinition<never, unknown, unknown>;

/** Identity with inference: `defineEffect({ resource: (i: Charge) => ..., apply: async (i, { lease }) => ... })`. */
export function defineEffect<I, R, P = undefined>(
  definition: SideEffectDefinition<I, R, P>,
): SideEffectDefinition<I, R, P> {
  return definition;
}

/** What `createSideEffectActivities` needs: the store that judges, the effects it guards, and where ReconcileWorkflows run. */
export interface SideEffectActivitiesOptions {
  store: Store;
  /** Each effect becomes an activity named after its key here (readable in the UI), and `probe:<name>` if it has a probe. */
  effects: Record<string, AnyEffect>;
  /**
   * How long one attempt may hold a resource; renewed (and Temporal heartbeated) every ttlMs/3
   * while apply runs. The effect activity's heartbeatTimeout must be at least ttlMs/2
   * (sideEffect's default is 1 minute), else it fails with SideEffectMisconfigured.
   */
  ttlMs: number;
  /** Starts and joins ReconcileWorkflows. */
  client: Client;
  /** The task queue whose workers run ReconcileWorkflow (workflows and the reconcile activities). */
  taskQueue: string;
  /** Reminder period of a waiting ReconcileWorkflow. Default 1 hour. */
  remindEveryMs?: number;
  /** Keep SideEffectKey/SideEffectResource/SideEffectState on ReconcileWorkflows. Default true; needs them registered as Keyword. */
  searchAttributes?: boolean;
  /** Lower bound of the retry delay after `contended`, so a lease about to expire is not hammered. Default 100 ms. */
  minContendedDelayMs?: number;
  /** At most this many uncertain keys get a ReconcileWorkflow per sweep. Default 1000. */
  sweepLimit?: number;
}

/** What one sweep did: the store's conclusions, and the uncertain keys that now have a ReconcileWorkflow (started or already running). */
export interface SweepAndReconcileReport {
  uncertain: string[];
  freed: string[];
  reconciling: string[];
}

/** The reconcile side, registered beside the effects. */
export interface ReconcileActivities {
  /** Starts or joins `reconcile/<key>` and subscribes the calling workflow; answers at once if the store already decided. */
  ensureReconcile(request: EnsureReconcileRequest): Promise<EnsureReconcileResponse>;
  /** The store's verdict on the key, or null while it is still uncertain. */
  inspectKey(key: string): Promise<Verdict | null>;
  /** Records a verdict; `decided: false` when the store had already decided (first resolution wins), with that verdict. */
  resolveKey(key: string, resolution: ResolveInput): Promise<Verdict & { decided: boolean }>;
  /** store.sweep(), then a ReconcileWorkflow for every uncertain key that has none. */
  sweepAndReconcile(): Promise<SweepAndReconcileReport>;
}

/** The activities object to register on a Worker. */
export type SideEffectActivities = ReconcileActivities &
  Record<string, (...args: never[]) => Promise<unknown>>;

const RESERVED = new Set(['ensureReconcile', 'inspectKey', 'resolveKey', 'sweepAndReconcile']);

/**
 * Builds the Temporal activities that put the store's gate in front of each
 * effect: key `<workflowId>/<step>`, lease renewed and heartbeated while apply
 * runs, outcomes mapped to Temporal failures a retry policy handles right
 * (contended retries after the lease, uncertain never retries blindly).
 */
export function createSideEffectActivities(
  options: SideEffectActivitiesOptions,
): SideEffectActivities {
  const { store, effects, client, taskQueue } = options;
  const ttlMs = checkTtl(options.ttlMs);
  const runner = new Runner(store, { ttlMs });
  const minContendedDelayMs = options.minContendedDelayMs ?? 100;
  const remindEveryMs = options.remindEveryMs;
  const searchAttributes = options.searchAttributes ?? true;

  const reconcileInput = (details: ReconcileInput): ReconcileInput => ({
    ...details,
    ...(remindEveryMs === undefined ? {} : { remindEveryMs }),
    searchAttributes,
  });

  const activities: Record<string, (...args: never[]) => Promise<unknown>> = {};
  for (const [name, effect] of Object.entries(effects)) {
    if (RESERVED.has(name) || name.startsWith('probe:'))
      throw new InvalidActionError('effects', `"${name}" is reserved for the reconcile activities`);
    activities[name] = effectActivity(name, effect);
    if (effect.probe) activities[probeActivityName(name)] = probeActivity(effect);
  }

  function effectActivity(name: string, effect: AnyEffect) {
    const inFlight = effect.inFlight && {
      gate: new KeyedGate(effect.inFlight.limit),
      key: effect.inFlight.key ?? (() => name),
      limit: effect.inFlight.limit,
    };
    const guarded = guardedActivity(name, effect);
    if (!inFlight) return guarded;
    return async (request: EffectRequest<never>): Promise<EffectResponse> => {
      const gateKey = inFlight.key(request.input);
      const release = inFlight.gate.tryAcquire(gateKey);
      if (!release) {
        throw ApplicationFailure.create({
          type: SideEffectFailureType.TooManyInFlight,
          message: `${inFlight.limit} attempt(s) of "${name}" already in flight for "${gateKey}" in this worker`,
          details: [{ effect: name, key: gateKey, limit: inFlight.limit }],
        });
      }
      try {
        return await guarded(request);
      } finally {
        release();
      }
    };
  }

  function guardedActivity(name: string, effect: AnyEffect) {
    return async (request: EffectRequest<never>): Promise<EffectResponse> => {
      const context = Context.current();
      const { info } = context;
      // No heartbeat timeout is legal (a crash is then noticed at startToCloseTimeout); one that
      // expires between two lease heartbeats would kill every apply longer than it.
      if (info.heartbeatTimeoutMs && info.heartbeatTimeoutMs < ttlMs / 2) {
        throw ApplicationFailure.create({
          type: SideEffectFailureType.Misconfigured,
          message: `heartbeatTimeout ${info.heartbeatTimeoutMs} ms is below ttlMs/2 (${ttlMs / 2} ms): the lease heartbeat every ttlMs/3 would time out`,
          nonRetryable: true,
        });
      }
      const workflowId = info.workflowExecution?.workflowId;
      if (request.key === undefined && workflowId === undefined) {
        throw nonRetryable(
          SideEffectFailureType.InvalidAction,
          'called outside a workflow: the request must carry a key',
        );
      }
      const key = request.key ?? `${workflowId}/${request.step ?? name}`;
      const { input } = request;
      let action: Action;
      try {
        action = {
          key,
          resource: effect.resource(input),
          payload: encodeJson(input).payload,
          retrySafety: effect.retrySafety ?? 'unknown',
        };
      } catch (error) {
        throw nonRetryable(SideEffectFailureType.InvalidAction, error);
      }
      const execute: ExecuteOptions = {
        signal: context.cancellationSignal,
        onRenewed: (lease) => context.heartbeat({ key, fence: lease.fence }),
      };
      const apply = async ({ lease, signal }: ApplyContext, prepared: unknown): Promise<Result> => {
        const result = await effect.apply(input, { key, lease, signal, prepared });
        try {
          return encodeJson(result);
        } catch (error) {
          throw new InvalidResult(error);
        }
      };
      let execution: Execution;
      try {
        execution = effect.prepare
          ? await runner.executeWith(
              action,
              {
                prepare: ({ signal }) => effect.prepare!(input, { key, signal }),
                apply: (prepared, applyContext) => apply(applyContext, prepared),
              },
              execute,
            )
          : await runner.execute(action, (applyContext) => apply(applyContext, undefined), execute);
      } catch (error) {
        throw toFailure(error);
      }
      switch (execution.outcome) {
        case 'applied':
        case 'replayed':
          return { outcome: execution.outcome, result: decodeJson(execution.result), key };
        case 'contended':
          throw ApplicationFailure.create({
            type: SideEffectFailureType.Contended,
            message: `resource "${action.resource}" is held by another caller; "${key}" retries in ${execution.retryAfterMs} ms`,
            details: [{ key, resource: action.resource, retryAfterMs: execution.retryAfterMs }],
            nextRetryDelay: Math.max(minContendedDelayMs, execution.retryAfterMs),
            cause: execution.error,
          });
        case 'uncertain': {
          const cause = execution.error.cause;
          if (cause instanceof InvalidResult) {
            throw nonRetryable(SideEffectFailureType.InvalidResult, cause.cause, [
              { key, resource: action.resource, reason: execution.reason },
            ]);
          }
          throw ApplicationFailure.create({
            type: SideEffectFailureType.OutcomeUncertain,
            message: execution.error.message,
            nonRetryable: true,
            details: [{ key, resource: action.resource, reason: execution.reason }],
            cause: cause instanceof Error ? cause : undefined,
          });
        }
        case 'failed':
          if (execution.error instanceof InvalidResult)
            throw nonRetryable(SideEffectFailureType.InvalidResult, execution.error.cause);
          throw execution.error;
      }
    };
  }

  function probeActivity(effect: AnyEffect) {
    return async (request: {
      key: string;
      resource: string;
      input: never;
    }): Promise<ProbeAnswer | null> => {
      const answer = await effect.probe!(request.input, {
        key: request.key,
        resource: request.resource,
      });
      if (answer === undefined || answer === null) return null;
      if (!answer.applied) return { applied: false };
      // The answer becomes the recorded result: refuse what could not be replayed.
      try {
        encodeJson(answer.result);
      } catch (error) {
        throw nonRetryable(SideEffectFailureType.InvalidResult, error);
      }
      return { applied: true, result: answer.result };
    };
  }

  const reconcile: ReconcileActivities = {
    async ensureReconcile(request) {
      const verdict = verdictOf(await inspect(request.key));
      if (verdict) return { verdict };
      const subscriber = Context.current().info.workflowExecution?.workflowId;
      if (subscriber === undefined)
        throw nonRetryable(
          SideEffectFailureType.InvalidAction,
          'ensureReconcile runs inside a workflow',
        );
      const { key, resource, reason, effect, input } = request;
      const probe = effect !== undefined && effects[effect]?.probe !== undefined;
      try {
        await client.workflow.signalWithStart<typeof ReconcileWorkflow, [Subscription]>(
          'ReconcileWorkflow',
          {
            workflowId: reconcileWorkflowId(key),
            taskQueue,
            args: [reconcileInput({ key, resource, reason, effect, input, probe })],
            signal: subscribeSignal,
            signalArgs: [{ workflowId: subscriber, effect, input, probe }],
            workflowIdConflictPolicy: 'USE_EXISTING',
          },
        );
      } catch (error) {
        throw toFailure(error);
      }
      return {};
    },

    async inspectKey(key) {
      return verdictOf(await inspect(key)) ?? null;
    },

    async resolveKey(key, resolution) {
      try {
        const outcome = await store.resolveUncertain(key, {
          applied: resolution.applied,
          reason: resolution.reason,
          ...(resolution.by === undefined ? {} : { by: resolution.by }),
          ...(resolution.applied ? { result: encodeJson(resolution.result) } : {}),
        });
        return outcome.applied
          ? {
              applied: true,
              result: decodeJson(outcome.result!),
              decided: outcome.outcome === 'resolved',
            }
          : { applied: false, decided: true };
      } catch (error) {
        if (!(error instanceof NotUncertainError)) throw toFailure(error);
        return { ...(verdictOf(await inspect(key)) ?? { applied: false }), decided: false };
      }
    },

    async sweepAndReconcile() {
      const { uncertain, freed } = await store.sweep();
      const open = await store.list({ state: 'uncertain', limit: options.sweepLimit ?? 1000 });
      const reconciling: string[] = [];
      for (const record of open) {
        await client.workflow.start<typeof ReconcileWorkflow>('ReconcileWorkflow', {
          workflowId: reconcileWorkflowId(record.key),
          taskQueue,
          args: [
            reconcileInput({
              key: record.key,
              resource: record.resource,
              reason: record.reason ?? 'uncertain',
            }),
          ],
          workflowIdConflictPolicy: 'USE_EXISTING',
        });
        reconciling.push(record.key);
      }
      return { uncertain, freed, reconciling };
    },
  };

  async function inspect(key: string): Promise<KeyRecord | undefined> {
    try {
      return await store.inspect(key);
    } catch (error) {
      throw toFailure(error);
    }
  }

  return Object.assign(activities, reconcile);
}

/** What the store says about a key: done -> applied with its result; uncertain -> undefined (undecided); anything else -> not applied. */
function verdictOf(record: KeyRecord | undefined): Verdict | undefined {
  if (record?.state === 'uncertain') return undefined;
  if (record?.state === 'done') return { applied: true, result: decodeJson(record.result!) };
  return { applied: false };
}

/** apply succeeded but its result cannot be recorded; carried through the Runner to become SideEffectInvalidResult. */
class InvalidResult extends Error {
  constructor(cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = 'InvalidResult';
  }
}

function nonRetryable(type: string, error: unknown, details?: unknown[]): ApplicationFailure {
  return ApplicationFailure.create({
    type,
    message: error instanceof Error ? error.message : String(error),
    nonRetryable: true,
    ...(details ? { details } : {}),
    cause: error instanceof Error ? error : undefined,
  });
}

/** Typed store errors become failures a retry policy handles right; anything else is rethrown (retryable). */
function toFailure(error: unknown): unknown {
  if (error instanceof InvalidActionError)
    return nonRetryable(SideEffectFailureType.InvalidAction, error);
  if (error instanceof KeyConflictError)
    return nonRetryable(SideEffectFailureType.KeyConflict, error, [
      { key: error.key, field: error.field },
    ]);
  if (error instanceof StoreUnavailableError) {
    return ApplicationFailure.create({
      type: SideEffectFailureType.StoreUnavailable,
      message: error.message,
      cause: error,
    });
  }
  return error;
}
