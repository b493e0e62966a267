// The app's workflows: a payment calling a guarded effect, plus the library's re-export.
import { proxySideEffects } from 'sideeffect/workflows';

export { ReconcileWorkflow } from 'sideeffect/workflows';

const { charge } = proxySideEffects();

export async function Pay(input) {
  return charge(input);
}
