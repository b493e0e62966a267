import type { PendingVerdictSummary } from '../protocol/wire.js';

/**
 * The run's details section for verdicts pending in the store on its attempt: who sent each,
 * when and what, and how to withdraw it. A verdict sent through the workflow meanwhile is refused
 * until they are judged or withdrawn; shown here, a person deciding sees them before sending.
 * Workflow-safe: text only.
 */
export function pendingDetails(key: string, pending: readonly PendingVerdictSummary[]): string {
  const lines = pending.map(
    (one) =>
      `- #${one.id} on attempt ${one.fence}: ${one.applied ? 'applied' : 'not applied'}, by ${one.by ?? 'unknown'} at ${one.at}: ${one.reason}`,
  );
  return [
    `**Pending verdicts** (waiting in the store for a worker's check; a verdict sent now is refused until they are judged or withdrawn):`,
    lines.join('\n'),
    `Withdraw a wrong one: \`sideeffect withdraw '${key}' --verdict ID --reason TEXT\`; \`sideeffect show '${key}'\` lists them all.`,
  ].join('\n\n');
}
