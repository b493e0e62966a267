import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import {
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  WorkflowUpdateRPCTimeoutOrCancelledError,
} from '@temporalio/client';
import { ApplicationFailure, NamespaceNotFoundError } from '@temporalio/common';
import { InvalidActionError, NotUncertainError, StaleVerdictError } from '../../../core/errors.js';
import { decodeJson, encodeJson } from '../../../core/json.js';
import { keepsPendingVerdicts, type PendingVerdictStore, type Store } from '../../../core/store.js';
import type { PendingVerdict } from '../../../core/verdict.js';
import { SideEffectFailureType } from '../../../protocol/failures.js';
import {
  CLI_UPDATE_ID_PREFIX,
  type ReconcileResolution,
  type ResolveInput,
  recheckSignal,
  reconcileWorkflowId,
  resolveUpdate,
  type Verdict,
} from '../../../protocol/wire.js';
import { shellWord } from '../../format.js';
import { cliIdentity } from '../../temporal.js';

/** How an operator's verdict ended: whether it was the one recorded, and what stands now. */
export interface ResolveReport extends Verdict {
  won: boolean;
  via: 'workflow' | 'store';
  reason?: string;
  by?: string;
  /** The attempt the verdict judged (its fence). */
  fence?: number;
  message: string;
  /** The ReconcileWorkflow did not answer within the wait: the verdict went to the store directly. */
  timedOut?: boolean;
  /**
   * Pending in the store until a worker runs the effect's result check on it: not decided yet (the
   * report's `applied`/`result` are the verdict as sent). See {@link pendingId}.
   */
  pending?: boolean;
  /** The pending verdict's id, as `sideeffect show` lists it. */
  pendingId?: number;
  /** No ReconcileWorkflow for the key in the client's namespace (a wrong `--namespace`, or none started yet). */
  notFound?: boolean;
}

/** How long the CLI keeps trying to prompt the ReconcileWorkflow (`recheck`) after holding a verdict. */
const PROMPT_FOR_MS = 30_000;
const PROMPT_EVERY_MS = 2_000;
/** How long `resolveKey` waits for a worker to judge a verdict it held, unless told otherwise. */
const DEFAULT_JUDGE_WAIT_MS = 10_000;

/**
 * How long `resolveKey` waits for the ReconcileWorkflow's answer unless told otherwise: long
 * enough for a busy worker to take the Update, short enough that a person is not left hanging.
 */
export const DEFAULT_WAIT_MS = 30_000;

/**
 * The key's latest attempt, for `--any-attempt`: sent as the verdict's fence, so the verdict still
 * judges exactly one attempt (the one printed) even if another becomes uncertain on the way.
 * Undefined for a key the store does not know or never granted: the store then says so.
 */
export async function currentAttempt(store: Store, key: string): Promise<number | undefined> {
  const record = await store.inspect(key);
  return record && record.fence > 0 ? record.fence : undefined;
}

/**
 * Decides an uncertain key. Through its running ReconcileWorkflow when there
 * is one, so the waiting workflow goes on at once; else in the store, held until a worker has run
 * the effect's result check on it. Either way the first resolution wins and a later one is told
 * what stands.
 *
 * The ReconcileWorkflow gets `waitMs` to answer. Past it (no worker polls its task queue, or its
 * activity slots are busy), or when Temporal does not answer or has no such workflow in the
 * namespace, the verdict is held in the store (a store without holding records it at once) and
 * the ReconcileWorkflow is prompted with `recheck` for a bounded time: its worker judges the held
 * verdict with the effect's check, and so does the worker's sweeper's prompt once Temporal
 * answers again. The CLI then waits up to `judgeWaitMs` for that judgement: accepted, the report
 * says decided; refused, an InvalidActionError says why (the key stays uncertain); neither yet, the
 * report is `pending` and says what happens next.
 */
export async function resolveKey(options: {
  store: Store;
  client?: Client | undefined;
  key: string;
  input: ResolveInput;
  waitMs?: number;
  judgeWaitMs?: number;
  /** Decide in the store at once, unchecked: for keys no Temporal worker serves (a plain Runner). */
  storeOnly?: boolean;
}): Promise<ResolveReport> {
  const { store, client, key, input } = options;
  if (options.storeOnly)
    return resolveInStore(store, key, input, cliIdentity(), 'store only, unchecked');
  const waitMs = options.waitMs ?? DEFAULT_WAIT_MS;
  let timedOut = false;
  let status: Awaited<ReturnType<typeof reconcileStatus>> | undefined;
  if (client) {
    status = await reconcileStatus(client, key);
    if (status === 'running') {
      const deadline = Date.now() + waitMs;
      try {
        const final = await client.connection.withDeadline(deadline, () =>
          client.workflow.getHandle(reconcileWorkflowId(key)).executeUpdate(resolveUpdate, {
            args: [input],
            updateId: `${CLI_UPDATE_ID_PREFIX}${randomUUID()}`,
          }),
        );
        return report('workflow', input, final, sameVerdict(input, final));
      } catch (error) {
        const refused =
          staleVerdict(key, error) ?? invalidVerdict(error) ?? validatorRefusal(key, input, error);
        if (refused) throw refused;
        // The server ends an Update's long poll a little before the client's deadline.
        timedOut =
          Date.now() >= deadline || error instanceof WorkflowUpdateRPCTimeoutOrCancelledError;
        // The workflow closed between the check and the update: the store has the verdict.
        if (!timedOut) {
          status = await reconcileStatus(client, key);
          if (status === 'running') throw error;
        }
      }
    }
  }
  // Recorded beside `by` as who delivered it, like the identity the Update would have carried.
  const identity = client?.options.identity ?? cliIdentity();
  if (!keepsPendingVerdicts(store)) {
    const stored = await resolveInStore(store, key, input, identity, 'store only');
    return timedOut ? { ...stored, timedOut } : stored;
  }
  const pending = await addPending(store, key, input, identity);
  if (!('verdict' in pending)) {
    if (timedOut && !pending.won && (await isOwnVerdict(store, key, input, identity))) {
      const landed = report('workflow', input, pending, true);
      return { ...landed, message: `${landed.message}, as the wait ran out` };
    }
    return pending;
  }
  const notFound = status === 'not found';
  const prompted =
    client !== undefined && status === 'running'
      ? promptRecheck(client, key)
      : Promise.resolve(false);
  // Only a worker reached through Temporal can judge it now; otherwise there is nothing to wait for.
  const judgeWaitMs = status === 'running' ? (options.judgeWaitMs ?? DEFAULT_JUDGE_WAIT_MS) : 0;
  const judged = await awaitJudgement(store, pending.verdict, judgeWaitMs);
  if (judged.state === 'refused')
    throw new InvalidActionError(
      'verdict',
      `${judged.why ?? "refused by the effect's result check"}; the key stays uncertain (see \`sideeffect show ${key}\`)`,
    );
  if (judged.state !== 'pending') {
    // Accepted: it decided. Late: another verdict decided first, and that one stands.
    const record = await store.inspect(key);
    const standing =
      record?.state === 'done'
        ? { applied: true, result: decodeJson(record.result!) }
        : ((await resolvedNotApplied(store, key)) ?? { applied: false });
    const decided = report('store', input, standing, judged.state === 'accepted');
    return { ...decided, message: `${decided.message}, checked by a worker` };
  }
  const why = timedOut
    ? `its ReconcileWorkflow did not answer within ${Math.round(waitMs / 1000)}s (are its worker's slots busy, or is no worker polling its task queue?)`
    : notFound
      ? `no ReconcileWorkflow ${reconcileWorkflowId(key)} in namespace ${client!.options.namespace} (check --namespace; a worker's sweeper starts one for every uncertain key it finds)`
      : status === 'closed'
        ? `its ReconcileWorkflow ${reconcileWorkflowId(key)} has closed (a worker's sweeper starts a new one)`
        : 'Temporal did not answer';
  const sent = await prompted;
  return {
    won: false,
    via: 'store',
    applied: input.applied,
    ...(input.applied ? { result: input.result ?? null } : {}),
    reason: input.reason,
    ...(input.by === undefined ? {} : { by: input.by }),
    pending: true,
    pendingId: judged.id,
    ...(timedOut ? { timedOut } : {}),
    ...(notFound ? { notFound } : {}),
    message: pendingMessage(key, why, judged.id, sent, client?.options.namespace, notFound),
  };
}

/**
 * What a person is told about a pending verdict: why it is pending, what happens to it and when, and
 * how to hurry it or look at it.
 */
function pendingMessage(
  key: string,
  why: string,
  id: number,
  prompted: boolean,
  namespace: string | undefined,
  notFound = false,
): string {
  const workflow = reconcileWorkflowId(key);
  // Not found there: repeating that namespace would send the person to the same wrong place.
  const ns = notFound
    ? ' --namespace <the namespace its workers poll>'
    : namespace === undefined
      ? ''
      : ` --namespace ${namespace}`;
  return [
    `${why}: your verdict is recorded in the store as pending verdict #${id} and decides nothing yet.`,
    `${prompted ? `${workflow} was sent \`recheck\`, so` : 'Once Temporal answers,'} a worker runs the effect's result check on it when ${workflow} next reads the store: at once when its worker has a free slot, and at the latest at the worker's next sweep (about every minute), which prompts it.`,
    'Accepted, it decides the key and the waiting workflow goes on; refused, the key stays uncertain and `sideeffect show` says why.',
    `Follow it: sideeffect show ${key}; prompt it yourself: temporal workflow signal --workflow-id '${workflow}' --name recheck${ns}`,
  ].join(' ');
}

/** Sends `recheck` until it is delivered or PROMPT_FOR_MS passed; whether it was delivered. */
async function promptRecheck(client: Client, key: string): Promise<boolean> {
  const until = Date.now() + PROMPT_FOR_MS;
  for (;;) {
    try {
      await client.workflow.getHandle(reconcileWorkflowId(key)).signal(recheckSignal);
      return true;
    } catch (error) {
      if (error instanceof WorkflowNotFoundError || Date.now() + PROMPT_EVERY_MS > until)
        return false;
      await new Promise((resolve) => setTimeout(resolve, PROMPT_EVERY_MS));
    }
  }
}

/** The pending verdict once a worker judged it, or as it stands after `waitMs`. */
async function awaitJudgement(
  store: Store & PendingVerdictStore,
  pending: PendingVerdict,
  waitMs: number,
): Promise<PendingVerdict> {
  const until = Date.now() + waitMs;
  let current = pending;
  while (current.state === 'pending' && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    current =
      (await store.pendingVerdicts(pending.key)).find((one) => one.id === pending.id) ?? current;
  }
  return current;
}

/** Holds the verdict for a worker's check: the pending verdict, or the report of what already stands. */
async function addPending(
  store: Store & PendingVerdictStore,
  key: string,
  input: ResolveInput,
  identity: string,
): Promise<{ verdict: PendingVerdict } | ResolveReport> {
  try {
    const outcome = await store.addPendingVerdict(key, {
      applied: input.applied,
      reason: input.reason,
      ...(input.applied ? { result: encodeJson(input.result ?? null) } : {}),
      ...(input.by ? { by: input.by } : {}),
      ...(input.fence === undefined ? {} : { fence: input.fence }),
      identity: viaStore(identity, 'store only'),
    });
    if (outcome.outcome === 'held') return { verdict: outcome.verdict };
    return report('store', input, { applied: true, result: decodeJson(outcome.result) }, false);
  } catch (error) {
    const earlier = error instanceof NotUncertainError && (await resolvedNotApplied(store, key));
    if (!earlier) throw error;
    return report('store', input, earlier, false);
  }
}

async function resolveInStore(
  store: Store,
  key: string,
  input: ResolveInput,
  identity: string,
  how: string,
) {
  try {
    const outcome = await store.resolveUncertain(key, {
      applied: input.applied,
      reason: input.reason,
      result: encodeJson(input.result ?? null),
      ...(input.by ? { by: input.by } : {}),
      ...(input.fence === undefined ? {} : { fence: input.fence }),
      identity: viaStore(identity, how),
    });
    const result = outcome.result && decodeJson(outcome.result);
    return report(
      'store',
      input,
      { applied: outcome.applied, result },
      outcome.outcome === 'resolved',
    );
  } catch (error) {
    const earlier = error instanceof NotUncertainError && (await resolvedNotApplied(store, key));
    if (!earlier) throw error;
    return report('store', input, earlier, false);
  }
}

/** The identity a verdict recorded by the CLI in the store directly carries: which path it took. */
function viaStore(identity: string, how: string): string {
  return identity.endsWith(')') ? `${identity.slice(0, -1)}, ${how})` : `${identity} (${how})`;
}

/**
 * Whether the verdict that stands on `key` is this very request's: its Update was recorded by the
 * ReconcileWorkflow (with this client's identity) just as the wait ran out, so the store then
 * refused the same verdict a second time. Without this the person is told their verdict was not
 * recorded, when it is the one that stands.
 */
async function isOwnVerdict(store: Store, key: string, input: ResolveInput, identity: string) {
  // Verdicts that moved the key; a held or refused one leaves it uncertain.
  const verdict = (await store.events(key))
    .filter((event) => event.from === 'uncertain' && event.to !== 'uncertain')
    .at(-1);
  return (
    verdict !== undefined &&
    verdict.identity === identity &&
    verdict.to === (input.applied ? 'done' : 'free') &&
    verdict.reason === input.reason &&
    (input.by === undefined || verdict.by === input.by)
  );
}

/** A free key whose last transition left `uncertain` was resolved as not applied: the verdict that stands. */
async function resolvedNotApplied(store: Store, key: string) {
  const last = (await store.events(key)).at(-1);
  if (last?.from !== 'uncertain' || last.to !== 'free') return undefined;
  return { applied: false, reason: last.reason, by: last.by };
}

/** The ReconcileWorkflow's Update refused the verdict as judging another attempt: the store's error, rebuilt. */
function staleVerdict(key: string, error: unknown): StaleVerdictError | undefined {
  const cause = error instanceof WorkflowUpdateFailedError ? error.cause : undefined;
  if (!(cause instanceof ApplicationFailure) || cause.type !== SideEffectFailureType.StaleVerdict)
    return undefined;
  const details = (cause.details?.[0] ?? {}) as Partial<StaleVerdictError>;
  return new StaleVerdictError(
    key,
    details.fence ?? Number.NaN,
    details.currentFence ?? Number.NaN,
    details.state ?? 'unknown',
  );
}

/**
 * The ReconcileWorkflow refused the verdict as invalid (say its result fails the effect's result
 * check): nothing was recorded, and the store must not be tried instead.
 */
function invalidVerdict(error: unknown): InvalidActionError | undefined {
  const cause = error instanceof WorkflowUpdateFailedError ? error.cause : undefined;
  if (!(cause instanceof ApplicationFailure) || cause.type !== SideEffectFailureType.InvalidAction)
    return undefined;
  return new InvalidActionError('verdict', `${cause.message}; nothing was recorded`);
}

/**
 * The Update's validator refused the verdict before the run saw it. A ReconcileWorkflow running
 * 0.1.0's code (a rollback) refuses `fence` as an unknown field; reported as unreachable (exit 3,
 * "pending") although nothing was recorded, it left the person without the reason or a way that
 * works there.
 */
function validatorRefusal(
  key: string,
  input: ResolveInput,
  error: unknown,
): InvalidActionError | undefined {
  const cause = error instanceof WorkflowUpdateFailedError ? error.cause : undefined;
  if (!(cause instanceof ApplicationFailure) || cause.type !== 'TypeError') return undefined;
  const said = `${reconcileWorkflowId(key)} refused the verdict: ${cause.message}; nothing was recorded`;
  if (!/unknown field\(s\)[^:]*\bfence\b/.test(cause.message))
    return new InvalidActionError('verdict', said);
  const signal = JSON.stringify({
    applied: input.applied,
    ...(input.applied ? { result: input.result } : {}),
    reason: input.reason,
    ...(input.by === undefined ? {} : { by: input.by }),
  });
  const verdict = input.applied
    ? `--applied --result ${shellWord(JSON.stringify(input.result ?? null))}`
    : '--not-applied';
  const fence = input.fence ?? 'N';
  return new InvalidActionError(
    'verdict',
    `${said}. It runs 0.1's workflow code (workers rolled back to 0.1.0), which takes no fence. What works there: decide in the store, checked by no worker (0.1.0's waiting callers see it at their next recheck): sideeffect resolve ${shellWord(key)} --fence ${fence} ${verdict} --reason ${shellWord(input.reason)} --store-only; or 0.1.0's signal, which names no attempt and decides whichever attempt that run waits for (send it only if that is attempt ${fence}, the one you checked): temporal workflow signal --workflow-id ${shellWord(reconcileWorkflowId(key))} --name resolve --input ${shellWord(signal)}`,
  );
}

async function reconcileStatus(
  client: Client,
  key: string,
): Promise<'running' | 'closed' | 'not found'> {
  try {
    const description = await client.workflow.getHandle(reconcileWorkflowId(key)).describe();
    return description.status.name === 'RUNNING' ? 'running' : 'closed';
  } catch (error) {
    if (error instanceof WorkflowNotFoundError || error instanceof NamespaceNotFoundError)
      return 'not found';
    throw error;
  }
}

function sameVerdict(input: ResolveInput, final: ReconcileResolution): boolean {
  return (
    final.decidedBy === 'update' &&
    final.applied === input.applied &&
    final.reason === input.reason &&
    final.by === input.by
  );
}

function report(
  via: ResolveReport['via'],
  input: ResolveInput,
  final: { applied: boolean; result?: unknown; reason?: string; by?: string },
  won: boolean,
): ResolveReport {
  const verdict = final.applied
    ? `applied, result ${JSON.stringify(final.result ?? null)}`
    : 'not applied';
  const attempt = input.fence === undefined ? '' : ` for the attempt with fence ${input.fence}`;
  const message = won
    ? `resolved: ${verdict}${attempt} (via ${via === 'workflow' ? 'its ReconcileWorkflow' : 'the store'})`
    : `already resolved${final.by ? ` by ${final.by}` : ''}: ${verdict}${final.reason ? ` (${final.reason})` : ''}; your verdict (${input.applied ? 'applied' : 'not applied'}) was not recorded`;
  return {
    won,
    via,
    applied: final.applied,
    result: final.result,
    reason: final.reason,
    by: final.by,
    ...(input.fence === undefined ? {} : { fence: input.fence }),
    message,
  };
}
