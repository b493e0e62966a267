/**
 * What the demo tells a person to do with an uncertain key: the UI steps with
 * the verdict to paste, the same from a terminal, and the batch forms for
 * many keys on the resource. The UI test pastes exactly `pasteable`, so what
 * the demo prints is what is known to work on the first Submit click.
 */
import {
  type ResolveInput,
  reconcileWorkflowId,
  verdictJson,
  waitingQuery,
} from '../src/workflows/index.js';

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
  // A batch verdict names no attempt: each ReconcileWorkflow applies it to the one it judges.
  const batchVerdict = { applied: false, reason: 'not in the bank export', by };
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
    `After an outage, every key waiting on ${resource} at once (the same verdict for each, so only "not applied"`,
    'or a result nobody reads; per-key results go in a file, one JSON verdict a line):',
    `    temporal workflow signal --query '${waitingQuery(resource)}' \\`,
    `      --name resolve --input '${JSON.stringify(batchVerdict)}' --reason "gateway outage" --yes`,
    `    npm run sideeffect -- resolve --resource '${resource}' --any-attempt --not-applied --reason "not in the bank export" --dry-run`,
    '    npm run sideeffect -- resolve --from-file verdicts.jsonl   # each line with its "fence"',
  ].join('\n');
  return { text, pasteable };
}
