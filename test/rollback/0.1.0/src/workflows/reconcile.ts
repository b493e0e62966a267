import {
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  condition,
  getExternalWorkflowHandle,
  log,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { SideEffectFailureType } from './failures.js';
import {
  type ProbeAnswer,
  probeActivityName,
  type ReconcileInput,
  type ReconcileResolution,
  type ReconcileStatus,
  type RejectedResolve,
  type ResolveInput,
  reconciledSignal,
  resolveSignal,
  resolveUpdate,
  searchAttributeKeys,
  statusQuery,
  subscribeSignal,
  type Verdict,
} from './protocol.js';

const HOUR = 60 * 60 * 1000;
/** Refused signals kept for the status query; older ones stay in the history. */
const MAX_REJECTED = 20;
const MAX_REASON_BYTES = 4096;
const MAX_BY_BYTES = 512;
const RESOLVE_FIELDS = new Set(['applied', 'result', 'reason', 'by']);

const store = proxyActivities<{
  inspectKey(key: string): Promise<Verdict | null>;
  resolveKey(key: string, resolution: ResolveInput): Promise<Verdict & { decided: boolean }>;
}>({ startToCloseTimeout: '1 minute' });

/** Retries a flaky downstream a few times, then leaves the decision to a person rather than looping forever. */
const probeOptions = {
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 5, initialInterval: '1 second', backoffCoefficient: 2 },
} as const;

/** Why `input` is not a valid `resolve` payload, or undefined if it is. Mirrors the store's own checks, so what passes here is accepted there. */
export function resolveInputError(input: unknown): string | undefined {
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    return 'expected one JSON object like {"applied": true, "result": ..., "reason": "...", "by": "..."}';
  const fields = input as Record<string, unknown>;
  const unknown = Object.keys(fields).filter((field) => !RESOLVE_FIELDS.has(field));
  if (unknown.length > 0)
    return `unknown field(s) ${unknown.join(', ')}: only applied, result, reason, by are read`;
  if (typeof fields.applied !== 'boolean') return '"applied" must be true or false';
  const reason = textError('reason', fields.reason, MAX_REASON_BYTES);
  if (reason) return reason;
  if (fields.by !== undefined) return textError('by', fields.by, MAX_BY_BYTES);
  return undefined;
}

function textError(field: string, value: unknown, maxBytes: number): string | undefined {
  if (typeof value !== 'string') return `"${field}" must be a string`;
  if (value.trim().length === 0) return `"${field}" must not be empty`;
  if (value.includes('\0') || !value.isWellFormed())
    return `"${field}" must be well-formed text without NUL`;
  if (utf8Length(value) > maxBytes) return `"${field}" is longer than ${maxBytes} bytes`;
  return undefined;
}

function utf8Length(text: string): number {
  let bytes = 0;
  for (const char of text) {
    const code = char.codePointAt(0)!;
    bytes += code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
  }
  return bytes;
}

interface Offer {
  resolution: ResolveInput;
  via: 'probe' | 'signal' | 'update';
  /** Set when the store refused it; an Update waiting on it then fails instead of hanging. */
  refused?: string;
}

/**
 * Decides one uncertain key, exactly once, in the open: workflow id
 * `reconcile/<key>`. It asks the effect's probe first; if the probe cannot
 * tell, it waits for a person's `resolve` signal (UI, CLI) or Update, records
 * the verdict in the store (first resolution wins), tells every subscribed
 * workflow, and returns the resolution. A malformed signal is kept in the
 * `status` query and ignored, so a typo never decides a payment.
 */
export async function ReconcileWorkflow(input: ReconcileInput): Promise<ReconcileResolution> {
  const { key, resource, reason, effect } = input;
  const remindEveryMs = input.remindEveryMs ?? HOUR;
  const indexed = input.searchAttributes !== false;
  const waitingSince = new Date().toISOString();
  const subscribers = new Set<string>();
  const rejected: RejectedResolve[] = [];
  let state: ReconcileStatus['state'] = 'checking';
  let probeFor = input.probe && effect ? { effect, input: input.input } : undefined;
  let probed = false;
  let offer: Offer | undefined;
  let resolution: ReconcileResolution | undefined;

  const refuse = (raw: unknown, error: string): void => {
    rejected.push({ at: new Date().toISOString(), input: raw, error });
    if (rejected.length > MAX_REJECTED) rejected.shift();
    log.warn('resolve refused; still waiting', { key, error });
  };

  setHandler(subscribeSignal, (subscription) => {
    subscribers.add(subscription.workflowId);
    // A reconcile started by the sweeper does not know the effect; its first subscriber does.
    if (!probeFor && subscription.probe && subscription.effect)
      probeFor = { effect: subscription.effect, input: subscription.input };
  });
  setHandler(resolveSignal, (raw: unknown) => {
    const error = resolveInputError(raw);
    if (error) refuse(raw, error);
    else if (offer)
      refuse(raw, `${lateVerdict(offer)}: first resolution wins, this one is ignored`);
    else offer = { resolution: raw as ResolveInput, via: 'signal' };
  });
  setHandler(
    resolveUpdate,
    async (resolutionInput) => {
      const mine: Offer = { resolution: resolutionInput, via: 'update' };
      offer ??= mine;
      await condition(() => resolution !== undefined || mine.refused !== undefined);
      if (resolution) return resolution;
      throw ApplicationFailure.create({
        type: SideEffectFailureType.InvalidAction,
        message: mine.refused!,
        nonRetryable: true,
      });
    },
    {
      validator: (resolutionInput) => {
        const error = resolveInputError(resolutionInput);
        if (error) throw new TypeError(error);
      },
    },
  );
  setHandler(statusQuery, () => {
    const status: ReconcileStatus = {
      key,
      resource,
      reason,
      state,
      waitingSince,
      rejected: [...rejected],
      subscribers: [...subscribers],
    };
    if (effect) status.effect = effect;
    if (resolution) status.resolution = resolution;
    return status;
  });

  upsertMemo({ key, resource, reason, ...(effect ? { effect } : {}) });
  if (indexed) {
    upsertSearchAttributes([
      { key: searchAttributeKeys.key, value: key },
      { key: searchAttributeKeys.resource, value: resource },
      { key: searchAttributeKeys.state, value: 'waiting' },
    ]);
  }
  setCurrentDetails(
    `**Outcome uncertain** for key \`${key}\` on \`${resource}\`: ${reason}.\n\n` +
      'Check the downstream, then send the signal `resolve` with ' +
      '`{"applied": true, "result": <what it returned>, "reason": "...", "by": "..."}` ' +
      'or `{"applied": false, "reason": "...", "by": "..."}`. The `status` query shows refused signals.',
  );

  const settled = await store.inspectKey(key);
  if (settled) {
    resolution = { key, ...settled, reason: 'already decided in the store', decidedBy: 'store' };
  }
  while (!resolution) {
    if (!offer && probeFor && !probed) {
      probed = true;
      state = 'probing';
      const answer = await probe(key, resource, probeFor.effect, probeFor.input);
      if (answer) {
        offer ??= {
          resolution: {
            ...answer,
            reason: `probe:${probeFor.effect} found it ${answer.applied ? 'applied' : 'not applied'}`,
            by: probeActivityName(probeFor.effect),
          },
          via: 'probe',
        };
      }
      continue;
    }
    if (offer) {
      state = 'resolving';
      const current = offer;
      try {
        const { decided, ...verdict } = await store.resolveKey(key, current.resolution);
        resolution = decided
          ? { key, ...verdict, ...describe(current) }
          : { key, ...verdict, reason: 'already decided in the store', decidedBy: 'store' };
      } catch (error) {
        const refused = refusal(error);
        if (refused === undefined) throw error;
        current.refused = refused;
        refuse(current.resolution, refused);
        offer = undefined;
      }
      continue;
    }
    state = 'waiting';
    const woken = await condition(
      () => offer !== undefined || (probeFor !== undefined && !probed),
      remindEveryMs,
    );
    if (!woken) {
      log.warn('side effect outcome still uncertain: waiting for a resolve signal', {
        key,
        resource,
        reason,
        waitingSince,
        workflowId: workflowInfo().workflowId,
      });
    }
  }

  state = 'resolved';
  if (indexed) upsertSearchAttributes([{ key: searchAttributeKeys.state, value: 'resolved' }]);
  setCurrentDetails(
    `Resolved: ${resolution.applied ? 'applied' : 'not applied'} (${resolution.reason}).`,
  );
  await notifySubscribers(key, resolution, subscribers);
  await condition(allHandlersFinished);
  return resolution;
}

/** Who got there first, for the one who did not. */
function lateVerdict(first: Offer): string {
  const by = first.resolution.by ? ` by ${first.resolution.by}` : '';
  return `already decided${by} (${first.via}: ${first.resolution.applied ? 'applied' : 'not applied'})`;
}

function describe(offer: Offer): Pick<ReconcileResolution, 'reason' | 'by' | 'decidedBy'> {
  const { reason, by } = offer.resolution;
  return by === undefined ? { reason, decidedBy: offer.via } : { reason, by, decidedBy: offer.via };
}

/** The store's refusal of a resolution (non-retryable invalid action), or undefined for any other failure. */
function refusal(error: unknown): string | undefined {
  if (!(error instanceof ActivityFailure)) return undefined;
  const cause = error.cause;
  if (cause instanceof ApplicationFailure && cause.type === SideEffectFailureType.InvalidAction)
    return cause.message;
  return undefined;
}

async function probe(
  key: string,
  resource: string,
  effect: string,
  input: unknown,
): Promise<ProbeAnswer | null> {
  const run =
    proxyActivities<
      Record<
        string,
        (request: { key: string; resource: string; input: unknown }) => Promise<ProbeAnswer | null>
      >
    >(probeOptions)[probeActivityName(effect)]!;
  try {
    return await run({ key, resource, input });
  } catch (error) {
    log.warn('probe failed; waiting for a person instead', {
      key,
      effect,
      error: error instanceof Error ? error.message : String(error),
    });
    return null;
  }
}

/** Signals every subscriber, including any that subscribes while this runs; a subscriber that is gone is skipped. */
async function notifySubscribers(
  key: string,
  resolution: ReconcileResolution,
  subscribers: Set<string>,
): Promise<void> {
  const notified = new Set<string>();
  const reconciled = resolution.applied
    ? { key, applied: true, result: resolution.result }
    : { key, applied: false };
  for (;;) {
    const pending = [...subscribers].filter((id) => !notified.has(id));
    if (pending.length === 0) return;
    await Promise.all(
      pending.map(async (workflowId) => {
        notified.add(workflowId);
        try {
          await getExternalWorkflowHandle(workflowId).signal(reconciledSignal, reconciled);
        } catch (error) {
          log.warn('could not notify subscriber', {
            key,
            workflowId,
            error: error instanceof Error ? error.message : String(error),
          });
        }
      }),
    );
  }
}
