/**
 * The test workflows, bundled by the Worker together with the library's own
 * (the re-export below is what every user's workflows file does).
 */
import { proxyActivities } from '@temporalio/workflow';
import {
  proxySideEffects,
  runSideEffect,
  type SideEffectOptions,
  type SideEffectOutcome,
  sideEffects,
} from '../../src/workflows/index.js';

export { ReconcileWorkflow } from '../../src/workflows/index.js';

/** One guarded call. */
export async function guarded(
  effect: string,
  input: unknown,
  options: SideEffectOptions = {},
): Promise<SideEffectOutcome<unknown>> {
  return runSideEffect(effect, input, options);
}

/** The same effect twice with the same step: the second call must replay the first. */
export async function guardedTwice(
  effect: string,
  input: unknown,
  options: SideEffectOptions = {},
): Promise<SideEffectOutcome<unknown>[]> {
  const first = await runSideEffect(effect, input, options);
  const second = await runSideEffect(effect, input, options);
  return [first, second];
}

/** Several guarded calls at once, each on its own step. */
export async function guardedParallel(
  effect: string,
  calls: Array<{ step: string; input: unknown }>,
  options: SideEffectOptions = {},
): Promise<SideEffectOutcome<unknown>[]> {
  return Promise.all(
    calls.map(({ step, input }) => runSideEffect(effect, input, { ...options, step })),
  );
}

/** The typed facade, as a user with `import type { effects }` writes it. */
interface LedgerEffects {
  ledgerWrite: { apply(input: { account: string; amount: number }): Promise<{ receipt: string }> };
}
export async function typedLedgerWrite(
  input: { account: string; amount: number },
  options: SideEffectOptions = {},
): Promise<string> {
  const { ledgerWrite } = proxySideEffects<LedgerEffects>(options);
  const { receipt } = await ledgerWrite(input);
  return receipt;
}

/** The same work as a plain activity, for the benchmark's baseline. */
export async function plain(input: unknown): Promise<unknown> {
  const { plainWrite } = proxyActivities<{ plainWrite(input: unknown): Promise<unknown> }>({
    startToCloseTimeout: '1 minute',
  });
  return plainWrite(input);
}

/** `n` guarded effects fanned out at most `limit` at a time; settled results in call order. */
export async function fanOut(
  effect: string,
  inputs: unknown[],
  limit: number,
  options: SideEffectOptions = {},
): Promise<PromiseSettledResult<SideEffectOutcome<unknown>>[]> {
  return sideEffects(
    inputs.map((input) => ({ effect, input })),
    { ...options, limit },
  );
}
