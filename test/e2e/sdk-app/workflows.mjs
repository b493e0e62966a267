// The app's workflows: a payment calling a guarded effect, plus the library's re-export.
import { sideEffect } from 'sideeffect/workflows';

export { ReconcileWorkflow } from 'sideeffect/workflows';

export async function Pay(input) {
  return sideEffect('charge', input);
}
