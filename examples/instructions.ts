/**
 * What the demo tells a person to do with an uncertain key: the UI steps with
 * the verdict to paste, the same from a terminal, and the batch forms for
 * many keys on the resource. The UI test pastes exactly `pasteable`, so what
 * the demo prints is what is known to work on the first Submit click.
 */

import { verdictJson } from '../src/protocol/wire.js';
import { type ResolveInput, reconcileWorkflowId, waitingQuery } from '../src/workflows/index.js';

export interface InstructionsInput {
  /** The Temporal web UI, e.g. http://localhost:8233. */
  uiUrl: string;
  namespace: string;
  key: string;
  resource: string;
  /**
   * The verdict a person would send after checking the downstream, with the fence of the attempt
   * checked: every command printed names it, so a verdict cannot land on a later attempt.
   */
  verdict: ResolveInput & { fence: number };
  /** One line on what the downstream shows for the key. */
  downstream: string;
}

export interface Instructions {
  /** Everything to print. */
  text: string;
  /** The verdict exactly as printed: paste it into the UI's "Send a Signal" input. */
  pasteable: string;
}

export function resolveInstructions(input: InstructionsInput): Instructions {
  const { uiUrl, namespace, key, resource, verdict, downstream } = input;
  const pasteable = verdictJson(verdict);
  const by = verdict.by ?? 'you';
  const notApplied = { applied: false, reason: 'not in the bank export', by, fence: verdict.fence };
  // One verdict for many keys cannot name each key's attempt: it says "any attempt" on purpose,
  // and a verdict naming none is refused.
  const batchVerdict = { applied: false, reason: 'not in the bank export', by, attempt: 'any' };
  const workflowId = reconcileWorkflowId(key);
  const cliVerdict = `--fence ${verdict.fence} ${
    verdict.applied
      ? `--applied --result '${JSON.stringify(verdict.result ?? null)}'`
      : '--not-applied'
  }`;
  const text = [
    'A person decides, in the Temporal UI:',
    '',
    `  1. Open   ${uiUrl}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`,
    `  2. Check  ${downstream}`,
    '  3. Click  "More Actions" > "Send a Signal", signal name: resolve, and paste as the input:',
    '',
    pasteable,
    '',
    `  (or ${JSON.stringify(notApplied)} if it never took effect: the caller then runs it again)`,
    '',
    'or from a terminal:',
    `    npm run sideeffect -- resolve '${key}' ${cliVerdict} --reason ${JSON.stringify(verdict.reason)}`,
    `    temporal workflow signal --workflow-id '${workflowId}' --name resolve --input '${JSON.stringify(verdict)}'`,
    '',
    `Every verdict names the attempt you checked ("fence", --fence): the page shows the key's latest attempt, and a`,
    'verdict about an earlier one must not decide it. One without is refused and shown on the page.',
    '',
    `After an outage, many keys waiting on ${resource}: first the dry run, listing each key's attempt (fence),`,
    'when it started and what would be decided; compare it with the bank export:',
    `    npm run sideeffect -- resolve --resource '${resource}' --any-attempt --not-applied --reason "not in the bank export" --dry-run`,
    'then per-key verdicts, one JSON line each with the "fence" of the attempt checked (`sideeffect list --state uncertain -o jsonl`):',
    '    npm run sideeffect -- resolve --from-file verdicts.jsonl --dry-run',
    '    npm run sideeffect -- resolve --from-file verdicts.jsonl',
    'or, only when the export shows no charge for any attempt of any of them, the same verdict for every attempt, said so:',
    `    npm run sideeffect -- resolve --resource '${resource}' --any-attempt --not-applied --reason "not in the bank export"`,
    `    temporal workflow signal --query '${waitingQuery(resource)}' \\`,
    `      --name resolve --input '${JSON.stringify(batchVerdict)}' --reason "gateway outage" --yes`,
  ].join('\n');
  return { text, pasteable };
}
