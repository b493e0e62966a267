/**
 * The workflows of the UI end-to-end test, bundled by its Worker together with the library's own
 * (the re-export is what every user's workflows file does).
 */
import {
  runSideEffect,
  type SideEffectOptions,
  type SideEffectOutcome,
} from '../../src/workflows/index.js';

export { ReconcileWorkflow } from '../../src/workflows/index.js';

/**
 * The same guarded transfer twice on one step: the first call may have to wait for a reconcile,
 * the second must replay whatever the first ended with.
 */
export async function transferTwice(
  input: unknown,
  options: SideEffectOptions = {},
): Promise<SideEffectOutcome<unknown>[]> {
  const first = await runSideEffect('transfer', input, { ...options, step: 'pay' });
  const second = await runSideEffect('transfer', input, { ...options, step: 'pay' });
  return [first, second];
}
