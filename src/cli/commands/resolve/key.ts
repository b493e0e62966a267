import type { DataConverter } from '@temporalio/client';
import { NotUncertainError, StaleVerdictError } from '../../../core/errors.js';
import type { Context } from '../../command.js';
import { shellWord } from '../../format.js';
import { connectTemporal, temporalClient, unreachable } from '../../temporal.js';
import { EXIT } from '../../usage.js';
import { currentAttempt, DEFAULT_WAIT_MS, resolveKey } from './deliver.js';
import { applied, type Common, common, type ResolveArgs, reason } from './options.js';

/** `sideeffect resolve <key>`: one verdict about one attempt of one key. */
export interface OneKey extends Common {
  form: 'key';
  key: string;
  applied: boolean;
  reason: string;
  result: unknown;
  /**
   * The attempt judged: `--fence N`, or `any` (`--any-attempt`) for whichever attempt is
   * uncertain when the verdict is sent, read from the store and printed. One is required: a
   * verdict about attempt 1 must not decide attempt 2 (a second charge).
   */
  attempt: { fence: number } | 'any';
  /** How long to wait for the ReconcileWorkflow before holding the verdict in the store. */
  waitMs: number;
}

/** Options of the forms that decide many keys. */
const MANY_ONLY = ['older-than', 'newer-than', 'dry-run'] as const;

export function parseKey(args: ResolveArgs): OneKey {
  const { values } = args;
  for (const option of MANY_ONLY)
    if (values[option] !== undefined) args.fail(`--${option} goes with --resource or --from-file`);
  const key = args.one();
  const isApplied = applied(args);
  const why = reason(args);
  if (values.result !== undefined && !isApplied) args.fail('--result only goes with --applied');
  // A default would record `null` for an effect whose callers expect a value, for good.
  if (isApplied && values.result === undefined)
    args.fail(
      '--applied needs --result JSON: what the effect returned (--result null for an effect that returns nothing)',
    );
  let result: unknown = null;
  if (values.result !== undefined) {
    try {
      result = JSON.parse(values.result);
    } catch {
      args.fail(`--result is not valid JSON: ${values.result}`);
    }
  }
  if (values['store-only'] && values.wait !== undefined)
    args.fail('--store-only asks no ReconcileWorkflow: it takes no --wait');
  return {
    form: 'key',
    key,
    applied: isApplied,
    reason: why,
    result,
    attempt: attempt(args, key, why),
    waitMs: values.wait ?? DEFAULT_WAIT_MS,
    ...common(args),
  };
}

/**
 * `--fence N` or `--any-attempt`, exactly one. Without either the person is shown how to find the
 * fence and the command with it: a verdict that judges whatever attempt is uncertain when it
 * arrives decides attempt 2 with what was checked about attempt 1.
 */
function attempt(args: ResolveArgs, key: string, why: string): OneKey['attempt'] {
  const { fence, result } = args.values;
  const any = args.values['any-attempt'] === true;
  if (any && fence !== undefined) args.fail('give --fence N or --any-attempt, not both');
  if (any) return 'any';
  if (fence !== undefined) return { fence };
  const verdict = args.values.applied
    ? `--applied --result ${shellWord(String(result))}`
    : '--not-applied';
  return args.fail(
    [
      'which attempt did you check? --fence N is required: N is the fence of the uncertain attempt, which `sideeffect show KEY` prints:',
      `  sideeffect show ${shellWord(key)}`,
      `  sideeffect resolve ${shellWord(key)} ${verdict} --reason ${shellWord(why)} --fence N`,
      'A verdict for another attempt is refused. --any-attempt instead decides whichever attempt is uncertain when it is sent (and prints its fence).',
    ].join('\n'),
  );
}

export async function runKey(
  params: OneKey,
  ctx: Context,
  dataConverter: DataConverter | undefined,
): Promise<number> {
  const { store } = ctx.database();
  const { key, applied, reason, result, by, storeOnly } = params;
  const temporal = ctx.temporal();
  const connection = storeOnly ? undefined : await connectTemporal(temporal);
  try {
    const client = connection && temporalClient(connection, temporal.namespace, dataConverter);
    if (!client && !storeOnly) ctx.err(unreachable(temporal));
    const fence =
      params.attempt === 'any' ? await currentAttempt(store, key) : params.attempt.fence;
    if (params.attempt === 'any' && fence !== undefined)
      ctx.err(
        `sideeffect: --any-attempt: deciding the attempt with fence ${fence}, the key's latest`,
      );
    const input = {
      applied,
      reason,
      by,
      ...(applied ? { result } : {}),
      ...(fence === undefined ? {} : { fence }),
    };
    const outcome = await resolveKey({
      store,
      client,
      key,
      input,
      waitMs: params.waitMs,
      ...(storeOnly ? { storeOnly: true } : {}),
    });
    // The JSON on stdout says it too; a person piping it should still see this.
    if ((outcome.timedOut || outcome.pending) && ctx.options.output !== 'text')
      ctx.err(`sideeffect: ${outcome.message}`);
    ctx.print(outcome.message, outcome);
    // Held, not decided: the waiting workflow was not told (a wrong --namespace lands here too).
    if (outcome.pending) return EXIT.unavailable;
    if (!outcome.won) return EXIT.refused;
    return client || storeOnly ? EXIT.ok : EXIT.unavailable;
  } catch (error) {
    if (error instanceof StaleVerdictError)
      return ctx.fail(
        error.code,
        `${error.message}: ${fencedCommand(params, error)}`,
        EXIT.refused,
        { fence: error.fence, currentFence: error.currentFence, state: error.state },
      );
    if (!(error instanceof NotUncertainError)) throw error;
    return ctx.fail(error.code, `${error.message}: nothing to resolve`, EXIT.refused, {
      state: error.state,
    });
  } finally {
    await connection?.close();
  }
}

/** What to run after a stale verdict: check the attempt that stands now, then this command. */
function fencedCommand(params: OneKey, error: StaleVerdictError): string {
  if (error.state !== 'uncertain') return `see \`sideeffect show ${shellWord(params.key)}\``;
  const verdict = params.applied
    ? `--applied --result ${shellWord(JSON.stringify(params.result))}`
    : '--not-applied';
  return `sideeffect resolve ${shellWord(params.key)} ${verdict} --reason ${shellWord(params.reason)} --fence ${error.currentFence}`;
}
