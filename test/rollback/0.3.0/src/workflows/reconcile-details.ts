/**
 * The waiting ReconcileWorkflow's details (the UI's User Metadata > Current Details): which
 * attempt a verdict judges and how to recognise it downstream, the verdicts on the key's earlier
 * attempts, the last refused verdict and why, and the verdicts to fill in. Built from sections,
 * so what else a person must see before deciding is one more section.
 */
import { ANY_ATTEMPT, fencePlaceholder, RESULT_PLACEHOLDER } from '../protocol/resolve-input.js';
import {
  type AttemptTimes,
  type EarlierVerdict,
  type RejectedResolve,
  type ResolveInput,
  verdictJson,
  waitingQuery,
} from '../protocol/wire.js';

/** A template laid out as the UI's signal form lays out a verdict; its placeholders are text. */
const template = (fields: Record<string, unknown>): string =>
  verdictJson(fields as unknown as ResolveInput);

/** What the details are made of. */
export interface DetailsView {
  key: string;
  resource: string;
  /** Why the attempt is uncertain. */
  reason: string;
  /** The attempt the run judges, when it was told. */
  fence?: number;
  attempt?: AttemptTimes;
  earlier?: readonly EarlierVerdict[];
  /**
   * Whether a verdict must name its attempt: false in a run held to 0.1 (`compatibleWith`),
   * which judges its own attempt and refuses `fence`, as 0.1.0 did.
   */
  namesAttempt: boolean;
  /** The latest refused verdict, shown until another replaces it. */
  lastRefused?: RejectedResolve;
}

/** The details as one Markdown text. */
export function waitingDetails(view: DetailsView): string {
  return detailsSections(view).join('\n\n');
}

/** The details' sections in the order a person reads them. */
function detailsSections(view: DetailsView): string[] {
  return [
    `**Outcome uncertain** for key \`${view.key}\` on \`${view.resource}\`: ${view.reason}.`,
    judgedSection(view),
    ...earlierSection(view.earlier),
    ...refusedSection(view.lastRefused),
    ...templateSections(view),
    `The \`status\` query lists every refused verdict with why. Every key waiting on this resource: \`${waitingQuery(view.resource)}\``,
  ];
}

function judgedSection({ fence, attempt }: DetailsView): string {
  if (fence === undefined)
    return 'A verdict here judges the attempt uncertain now (this run was not told its fence: `sideeffect show KEY` prints it).';
  const times = [
    attempt?.startedAt ? `started ${attempt.startedAt}` : undefined,
    attempt?.endedAt ? `uncertain since ${attempt.endedAt}` : undefined,
  ].filter((part) => part !== undefined);
  return `**This run judges attempt ${fence}** (fence ${fence}${times.length > 0 ? `; ${times.join(', ')}` : ''}). Its downstream writes carry fence ${fence}: check that attempt, not an earlier one.`;
}

function earlierSection(earlier: readonly EarlierVerdict[] | undefined): string[] {
  if (!earlier || earlier.length === 0) return [];
  return [
    [
      'Earlier attempts of this key, already decided:\n',
      ...earlier.map(
        (verdict) =>
          `- attempt ${verdict.fence}: ${verdict.applied ? 'applied' : 'not applied'}, by ${verdict.by} at ${verdict.at} (${verdict.reason})`,
      ),
    ].join('\n'),
  ];
}

function refusedSection(refused: RejectedResolve | undefined): string[] {
  if (!refused) return [];
  const sent = typeof refused.input === 'string' ? refused.input : JSON.stringify(refused.input);
  return [
    `**Last verdict refused** (${refused.at}, nothing was decided): ${refused.error}\n\nIt was: \`${sent}\``,
  ];
}

function templateSections({ fence, namesAttempt }: DetailsView): string[] {
  // Placeholders only where the run refuses them: a run held to 0.1 would record one as given.
  const attempt = namesAttempt ? { fence: fencePlaceholder(fence) } : {};
  const applied = template({
    applied: true,
    ...(namesAttempt ? { result: RESULT_PLACEHOLDER } : {}),
    reason: 'found in the downstream',
    by: 'your name',
    ...attempt,
  });
  const notApplied = template({
    applied: false,
    reason: 'not in the downstream',
    by: 'your name',
    ...attempt,
  });
  const fill = namesAttempt
    ? `Replace the placeholders: \`fence\` is the attempt you checked (a verdict for an attempt no longer uncertain is refused), \`result\` what the effect returned (leave it out only for an effect declared \`result: 'void'\`). Sent unchanged, a template is refused. \`"attempt": "${ANY_ATTEMPT}"\` instead of \`fence\` decides attempt ${fence ?? 'uncertain now'} whatever you checked: only when what you found holds for any attempt.`
    : `This run keeps 0.1's behaviour: a verdict judges attempt ${fence ?? 'uncertain now'} and may not carry \`fence\`. For "applied", add \`"result": <what the effect returned>\` (leave it out only for an effect declared \`result: 'void'\`).`;
  return [
    'Check the downstream, then More Actions > Send a Signal, name `resolve`, with either:',
    `\`\`\`json\n${applied}\n\`\`\``,
    'or, if it never took effect:',
    `\`\`\`json\n${notApplied}\n\`\`\``,
    fill,
  ];
}
