import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { BreakerOpenError, NotAppliedError } from '../core/errors.js';
import { decodeJson, encodeJson } from '../core/json.js';
import type {
  ApplyContext,
  AttemptBreaker,
  ExecuteOptions,
  Execution,
  Runner,
} from '../core/runner.js';
import type { Store, TransactionContext, TransactionIsolation } from '../core/store.js';
import type { Action, Result } from '../core/types.js';
import { SideEffectFailureType } from '../protocol/failures.js';
import { OUTCOMES_METRIC, type OutcomeLabel } from '../protocol/metrics.js';
import type { EffectRequest, EffectResponse, ProbeAnswer } from '../protocol/wire.js';
import { KeyedGate } from '../syncx/index.js';
import {
  type BreakerDefaults,
  type BreakerGate,
  breakerPolicy,
  type Observer,
} from './breaker-gate.js';
import type { AnyEffect, SideEffectDefinition } from './effect.js';
import { nonRetryable, toFailure } from './failures.js';
import { resultError } from './result-check.js';

/** What every effect activity shares: the Runner over the store, the lease TTL, the floor of a contended retry. */
export interface EffectActivityContext {
  runner: Runner;
  ttlMs: number;
  minContendedDelayMs: number;
  /** The store's breakers, when it keeps them, and the plugin's default of every effect's breaker. */
  breakers?: { gate: BreakerGate; defaults: BreakerDefaults };
}

/**
 * The activity that guards one effect: builds the action (key `<workflowId>/<step>`),
 * runs it through the Runner with the lease heartbeated, and maps each outcome to
 * the Temporal failure a retry policy handles right.
 */
export function effectActivity(name: string, effect: AnyEffect, shared: EffectActivityContext) {
  const inFlight = effect.inFlight && {
    gate: new KeyedGate(effect.inFlight.limit),
    key: effect.inFlight.key ?? (() => name),
    limit: effect.inFlight.limit,
  };
  const policy =
    shared.breakers && !effect.transactional
      ? breakerPolicy(name, effect.breaker, shared.breakers.defaults)
      : undefined;
  const gate = shared.breakers?.gate;
  const breakerOf: BreakerOf | undefined =
    policy && gate && ((key, seen) => gate.attempt(policy, key, seen));
  const guarded = guardedActivity(name, effect, shared, breakerOf);
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

function guardedActivity(
  name: string,
  effect: AnyEffect,
  { runner, ttlMs, minContendedDelayMs }: EffectActivityContext,
  breakerOf: BreakerOf | undefined,
) {
  // A transactional effect's failure rolls everything back: it is never uncertain to begin with.
  const definite = new Set(effect.transactional ? [] : (effect.definiteFailures ?? []));
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
      isDefinite: (error) => definite.has(failureType(error) ?? ''),
      ...(breakerOf && {
        breaker: breakerOf(key, {
          meter: context.metricMeter,
          log: (message, attributes) => context.log.warn(message, attributes),
        }),
      }),
    };
    const recordable = (result: unknown): Result => {
      try {
        return encodeJson(result);
      } catch (error) {
        throw new InvalidResult(error);
      }
    };
    const apply = async ({ lease, signal }: ApplyContext, prepared: unknown): Promise<Result> =>
      recordable(await (effect as PlainEffect).apply(input, { key, lease, signal, prepared }));
    let execution: Execution;
    try {
      execution = effect.transactional
        ? await inTransaction(
            runner,
            action,
            context,
            { ttlMs, isolation: effect.isolation },
            async ({ tx, fence, signal }) =>
              recordable(await effect.apply(input, { tx: tx as never, key, fence, signal })),
          )
        : effect.prepare
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
    if (execution.outcome === 'failed' && execution.error instanceof BreakerOpenError) {
      countOutcome(context, name, 'paused');
      throw paused(execution.error, key, minContendedDelayMs);
    }
    countOutcome(context, name, execution.outcome === 'failed' ? 'not_applied' : execution.outcome);
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
        // The workflow asked to stop and nothing is recorded (a failed call always frees the key):
        // report the activity cancelled, so a cancelled workflow ends CANCELED instead of FAILED.
        if (context.cancellationDetails?.cancelRequested)
          throw new CancelledFailure(
            `cancelled; nothing applied: ${execution.error instanceof Error ? execution.error.message : String(execution.error)}`,
            [{ key, resource: action.resource }],
          );
        if (execution.definite) throw refusal(execution.error, key, action.resource, definite);
        if (execution.error instanceof InvalidResult)
          throw nonRetryable(SideEffectFailureType.InvalidResult, execution.error.cause);
        // A refused misuse (the work ended the store's transaction, wrote through a FencedSink)
        // does the same on every attempt, and each may leave what it wrote outside behind.
        throw toFailure(execution.error);
    }
  };
}

type PlainEffect = SideEffectDefinition<never, unknown, unknown>;

/** The breaker step of one call's attempt, for the effect's policy. */
type BreakerOf = (key: string, seen: Observer) => AttemptBreaker;

/** The retryable failure of a call whose breaker is open: waits until the next half-open. */
function paused(error: BreakerOpenError, key: string, floorMs: number): ApplicationFailure {
  const { record, retryAt, retryAfterMs } = error;
  return ApplicationFailure.create({
    type: SideEffectFailureType.Paused,
    message: error.message,
    details: [
      {
        key,
        group: record.group,
        state: record.state,
        reason: record.reason,
        by: record.by,
        since: record.since,
        retryAt,
        retryAfterMs,
      },
    ],
    nextRetryDelay: Math.max(floorMs, retryAfterMs),
  });
}

/**
 * Runs a transactional effect, heartbeating Temporal every ttl/3 meanwhile. No lease renewal:
 * the transaction's row lock holds the resource until commit, and a lost connection rolls back.
 */
async function inTransaction(
  runner: Runner,
  action: Action,
  context: Context,
  { ttlMs, isolation }: { ttlMs: number; isolation: TransactionIsolation | undefined },
  work: (context: TransactionContext<unknown>) => Promise<Result>,
): Promise<Execution> {
  const heartbeat = setInterval(() => context.heartbeat(), Math.max(1, Math.floor(ttlMs / 3)));
  try {
    return await runner.executeInTransaction(action, work, {
      signal: context.cancellationSignal,
      ...(isolation === undefined ? {} : { isolation }),
    });
  } finally {
    clearInterval(heartbeat);
  }
}

/** One guarded call's end, on the worker's metric meter: a rise in `uncertain` is what pages someone. */
function countOutcome(context: Context, effect: string, outcome: OutcomeLabel): void {
  context.metricMeter
    .createCounter(OUTCOMES_METRIC, 'calls', 'guarded side-effect calls, by how they ended')
    .add(1, { effect, outcome });
}

/** `probe:<effect>`: asks the downstream whether a key took effect; null when it cannot tell. */
export function probeActivity(effect: AnyEffect, store: Store) {
  return async (request: {
    key: string;
    resource: string;
    input: never;
  }): Promise<ProbeAnswer | null> => {
    let fence: number;
    try {
      fence = ((await store.inspect(request.key))?.fence ?? 0) + 1;
    } catch (error) {
      throw toFailure(error);
    }
    const answer = await effect.probe!(request.input, {
      key: request.key,
      resource: request.resource,
      fence,
    });
    if (answer === undefined || answer === null) return null;
    if (!answer.applied) return { applied: false };
    // The answer becomes the recorded result: refuse what could not be replayed, or what the
    // effect's callers could not use; the reconcile then waits for a person.
    try {
      encodeJson(answer.result);
    } catch (error) {
      throw nonRetryable(SideEffectFailureType.InvalidResult, error);
    }
    const invalid = await resultError(effect, answer.result);
    if (invalid !== undefined)
      throw nonRetryable(
        SideEffectFailureType.InvalidResult,
        `probe answer refused by the effect's result check: ${invalid}`,
      );
    return { applied: true, result: answer.result };
  };
}

/** An ApplicationFailure's `type`, else the error's `name`: what `definiteFailures` lists. */
function failureType(error: unknown): string | undefined {
  if (error instanceof ApplicationFailure) return error.type ?? undefined;
  return error instanceof Error ? error.name : undefined;
}

/**
 * A definite refusal as the workflow sees it: non-retryable, with the apply's own type and
 * details (a NotAppliedError without a type becomes `SideEffectNotApplied`), the key free again.
 */
function refusal(
  error: unknown,
  key: string,
  resource: string,
  definite: ReadonlySet<string>,
): ApplicationFailure {
  const message = error instanceof Error ? error.message : String(error);
  const cause = error instanceof Error ? error : undefined;
  if (error instanceof NotAppliedError) {
    return ApplicationFailure.create({
      type: error.type ?? SideEffectFailureType.NotApplied,
      message,
      nonRetryable: true,
      details: error.details.length > 0 ? error.details : [{ key, resource }],
      cause,
    });
  }
  if (error instanceof ApplicationFailure) {
    return ApplicationFailure.create({
      type: error.type ?? undefined,
      message,
      nonRetryable: true,
      details: error.details ?? [],
      ...(error.cause ? { cause: error.cause } : {}),
    });
  }
  // A listed type keeps its name; anything else a sink proved unwritten (a pg error, a lost
  // connection before COMMIT) is just "not applied".
  const type = failureType(error);
  return ApplicationFailure.create({
    type: type !== undefined && definite.has(type) ? type : SideEffectFailureType.NotApplied,
    message,
    nonRetryable: true,
    details: [{ key, resource }],
    cause,
  });
}

/** apply succeeded but its result cannot be recorded; carried through the Runner to become SideEffectInvalidResult. */
class InvalidResult extends Error {
  constructor(cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = 'InvalidResult';
  }
}
