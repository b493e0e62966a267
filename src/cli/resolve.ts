import { randomUUID } from 'node:crypto';
import { hostname, userInfo } from 'node:os';
import type { Client } from '@temporalio/client';
import { WorkflowNotFoundError, WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { InvalidActionError, NotUncertainError, StaleVerdictError } from '../core/errors.js';
import { decodeJson, encodeJson } from '../core/json.js';
import type { Store } from '../core/store.js';
import { SideEffectFailureType } from '../protocol/failures.js';
import {
  CLI_UPDATE_ID_PREFIX,
  type ReconcileResolution,
  type ResolveInput,
  recheckSignal,
  reconcileWorkflowId,
  resolveUpdate,
} from '../protocol/wire.js';

/** How an operator's verdict ended: whether it was the one recorded, and what stands now. */
export interface ResolveReport {
  won: boolean;
  via: 'workflow' | 'store';
  applied: boolean;
  result?: unknown;
  reason?: string;
  by?: string;
  /** The attempt the verdict judged (its fence). */
  fence?: number;
  message: string;
  /** The ReconcileWorkflow did not answer within the wait: the verdict went to the store directly. */
  timedOut?: boolean;
}

/**
 * The Temporal identity of this CLI process, `sideeffect-cli:<OS user>@<host> (pid N)`, as the
 * `temporal` CLI writes its own: the audit trail then says which account on which machine sent a
 * verdict, beside the `--by` it typed. Still declared by this process, not proven (see
 * docs/operations.md, "Who decided").
 */
export function cliIdentity(): string {
  let user: string;
  try {
    user = userInfo().username;
  } catch {
    user = process.env.USER ?? process.env.LOGNAME ?? 'unknown-user';
  }
  return `sideeffect-cli:${user}@${hostname()} (pid ${process.pid})`;
}

/** How long `resolveKey` waits for the ReconcileWorkflow's answer unless told otherwise. */
const DEFAULT_WAIT_MS = 30_000;

/**
 * Decides an uncertain key. Through its running ReconcileWorkflow when there
 * is one, so the waiting workflow goes on at once; else straight in the store.
 * Either way the first resolution wins and a later one is told what stands.
 *
 * The ReconcileWorkflow gets `waitMs` to answer. Past it (no worker polls its task queue) the
 * verdict is recorded in the store directly and the workflow is sent a `recheck` signal: the
 * Update may still be admitted and run when a worker comes back, but by then the store has the
 * verdict, so it changes nothing, and the person is told the verdict that stands rather than a
 * failure that would later turn out applied. The effect's result check does not run on that
 * path (only a worker knows the effect).
 */
export async function resolveKey(options: {
  store: Store;
  client?: Client | undefined;
  key: string;
  input: ResolveInput;
  waitMs?: number;
}): Promise<ResolveReport> {
  const { store, client, key, input } = options;
  const waitMs = options.waitMs ?? DEFAULT_WAIT_MS;
  let timedOut = false;
  if (client && (await isRunning(client, key))) {
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
      const refused = staleVerdict(key, error) ?? invalidVerdict(error);
      if (refused) throw refused;
      timedOut = Date.now() >= deadline;
      // The workflow closed between the check and the update: the store has the verdict.
      if (!timedOut && (await isRunning(client, key))) throw error;
    }
  }
  // Recorded beside `by` as who delivered it, like the identity the Update would have carried.
  const identity = client?.options.identity ?? cliIdentity();
  const stored = await resolveInStore(store, key, input, identity);
  if (!timedOut) return stored;
  if (!stored.won && (await isOwnVerdict(store, key, input, identity))) {
    const landed = report('workflow', input, stored, true);
    return { ...landed, message: `${landed.message}, as the wait ran out` };
  }
  // Ends the waiting ReconcileWorkflow once a worker reads its signals again.
  await client!.workflow
    .getHandle(reconcileWorkflowId(key))
    .signal(recheckSignal)
    .catch(() => {});
  const seconds = Math.round(waitMs / 1000);
  const prefix = `its ReconcileWorkflow did not answer within ${seconds}s (is a worker polling its task queue?), so the verdict went to the store directly`;
  const after =
    "the ReconcileWorkflow and the waiting workflow take the store's verdict when a worker runs them again; the unanswered Update can no longer change it";
  return { ...stored, timedOut, message: `${prefix}: ${stored.message}; ${after}` };
}

async function resolveInStore(store: Store, key: string, input: ResolveInput, identity: string) {
  try {
    const outcome = await store.resolveUncertain(key, {
      applied: input.applied,
      reason: input.reason,
      result: encodeJson(input.result ?? null),
      ...(input.by ? { by: input.by } : {}),
      ...(input.fence === undefined ? {} : { fence: input.fence }),
      identity: storeOnly(identity),
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
function storeOnly(identity: string): string {
  return identity.endsWith(')')
    ? `${identity.slice(0, -1)}, store only)`
    : `${identity} (store only)`;
}

/**
 * Whether the verdict that stands on `key` is this very request's: its Update was recorded by the
 * ReconcileWorkflow (with this client's identity) just as the wait ran out, so the store then
 * refused the same verdict a second time. Without this the person is told their verdict was not
 * recorded, when it is the one that stands.
 */
async function isOwnVerdict(store: Store, key: string, input: ResolveInput, identity: string) {
  const verdict = (await store.events(key)).filter((event) => event.from === 'uncertain').at(-1);
  return (
    verdict !== undefined &&
    verdict.identity === identity &&
    verdict.to === (input.applied ? 'done' : 'free') &&
    verdict.reason === input.reason &&
    (input.by === undefined || verdict.actor === input.by)
  );
}

/** A free key whose last transition left `uncertain` was resolved as not applied: the verdict that stands. */
async function resolvedNotApplied(store: Store, key: string) {
  const last = (await store.events(key)).at(-1);
  if (last?.from !== 'uncertain' || last.to !== 'free') return undefined;
  return { applied: false, reason: last.reason, by: last.actor };
}

/** The ReconcileWorkflow's Update refused the verdict as judging another episode: the store's error, rebuilt. */
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

async function isRunning(client: Client, key: string): Promise<boolean> {
  try {
    const description = await client.workflow.getHandle(reconcileWorkflowId(key)).describe();
    return description.status.name === 'RUNNING';
  } catch (error) {
    if (error instanceof WorkflowNotFoundError) return false;
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
