/** A workflows module that forgot `export { ReconcileWorkflow } from 'sideeffect/workflows'`. */
import { runSideEffect, type SideEffectOutcome } from '../../src/workflows/index.js';

export async function guarded(effect: string, input: unknown): Promise<SideEffectOutcome<unknown>> {
  return runSideEffect(effect, input);
}
