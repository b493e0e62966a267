/** The demo's workflows. A task queue runs one bundle, so the library's own workflows are re-exported here. */
import { runSideEffect, type SideEffectOutcome } from '../src/workflows/index.js';
import type { Charge, ChargeInput } from './effects.js';

export { ReconcileWorkflow } from '../src/workflows/index.js';

/** Charges an order's card once, however often the order is submitted or the activity retried. */
export async function PaymentWorkflow(input: ChargeInput): Promise<SideEffectOutcome<Charge>> {
  return runSideEffect<Charge>('charge', input, {
    // Contention is retried by Temporal at the time the holder's lease ends.
    retry: { initialInterval: '500ms', maximumInterval: '5s' },
  });
}
