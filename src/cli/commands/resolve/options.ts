import type { Args, Options } from '../../command.js';
import { duration, nonEmpty } from '../../option-checks.js';
import { DEFAULT_WAIT_MS } from './deliver.js';

/**
 * Every option of `sideeffect resolve`, for its three forms: one key (`resolve <key>`), every
 * uncertain key of a resource (`--resource`), one verdict a line (`--from-file`). Each form
 * refuses the options of the others by name.
 */
export const RESOLVE_OPTIONS = {
  applied: {
    type: 'boolean',
    description:
      "it took effect; --result (required) is the JSON the workflow will get, null for an effect that returns nothing. A worker checks it against the effect's declared result check and refuses a bad one before recording it",
  },
  'not-applied': {
    type: 'boolean',
    description: 'it did not; the waiting workflow runs the effect again',
  },
  reason: {
    type: 'string',
    arg: 'TEXT',
    description: 'required: what you checked and found, recorded with the verdict',
  },
  result: {
    type: 'string',
    arg: 'JSON',
    description: 'with --applied on one key: what the effect returned',
  },
  by: {
    type: 'string',
    arg: 'NAME',
    description: 'who decided, recorded with the verdict (default cli:<your OS user>)',
  },
  fence: {
    type: 'string',
    arg: 'N',
    description:
      "required for one key: the attempt you checked, the key's fence while uncertain (sideeffect show KEY prints it). If the key was since re-applied and became uncertain again, your verdict is about an earlier attempt: refused (exit 1), naming the attempt that is uncertain now",
    parse: (value, { fail }) => {
      const fence = Number(value);
      return /^\d+$/.test(value) && Number.isSafeInteger(fence) && fence >= 1
        ? fence
        : fail(
            '--fence must be the fence of the uncertain attempt (a positive integer; sideeffect show KEY prints it)',
          );
    },
  },
  'any-attempt': {
    type: 'boolean',
    description:
      "instead of --fence: decide whichever attempt is uncertain when the verdict is sent, and print its fence. Only when what you checked holds for any attempt. Required with --resource; with --from-file, decides each fence-less line's current attempt",
  },
  wait: {
    type: 'string',
    arg: 'D',
    description: `how long the ReconcileWorkflow gets to answer (default ${DEFAULT_WAIT_MS / 1000}s; 45s, 2m...). Past it (its worker busy or gone), when Temporal does not answer, or when the namespace has no reconcile/<key>, the verdict is recorded in the store as a PENDING verdict (exit 3): a worker runs the effect's result check on it when the key's ReconcileWorkflow next reads the store (the CLI sends it \`recheck\`; the worker's sweeper prompts it about every minute once Temporal answers). Accepted, it decides; refused, the key stays uncertain. sideeffect show <key> lists pending verdicts and why one was refused`,
    parse: duration,
  },
  'store-only': {
    type: 'boolean',
    description:
      'decide in the store at once, checked by no worker: only for keys no Temporal worker serves (a plain Runner). All three forms',
  },
  resource: {
    type: 'string',
    arg: 'R',
    description:
      "every key uncertain on R now, each at its current attempt (--any-attempt is required; the summary prints each key's fence). No --result: every key would get the same one; per-key results go in --from-file",
    parse: nonEmpty('--resource needs a resource name'),
  },
  'older-than': {
    type: 'string',
    arg: 'D',
    description: 'with --resource: only keys uncertain for longer than D (30d, 1h30m, 45s)',
    parse: duration,
  },
  'newer-than': {
    type: 'string',
    arg: 'D',
    description: 'with --resource: only keys uncertain for less than D',
    parse: duration,
  },
  'from-file': {
    type: 'string',
    arg: 'F',
    description:
      'one JSON object a line: {"key": "...", "applied": true, "result": {...}, "reason": "...", "by": "...", "fence": 7} (result and by optional; fence required unless --any-attempt). Every line is checked before anything is sent (exit 2 on the first bad line)',
    parse: nonEmpty('--from-file needs a file name'),
  },
  'dry-run': {
    type: 'boolean',
    description: 'with --resource or --from-file: read which keys are uncertain, send nothing',
  },
  'data-converter': {
    type: 'string',
    arg: 'PATH',
    description:
      'a module exporting `dataConverter` (or a default export): the data converter your Client and Worker use, e.g. with an encryption codec (default: SIDEEFFECT_DATA_CONVERTER; without one, encrypted payloads cannot be read). All three forms',
    parse: nonEmpty('--data-converter needs a module path'),
  },
} as const satisfies Options;

/** The command line of `sideeffect resolve`, as each form reads it. */
export type ResolveArgs = Args<typeof RESOLVE_OPTIONS>;

/** What every form takes: who decides, through which data converter, past the workers or not. */
export interface Common {
  /** Who decided; default `cli:<OS user>`. */
  by: string;
  /** Module whose `dataConverter` export the Temporal Client uses (`--data-converter`). */
  dataConverter?: string;
  /** `--store-only`: decide in the store at once, unchecked (keys no Temporal worker serves). */
  storeOnly?: boolean;
}

export function common(args: ResolveArgs): Common {
  const { by, 'data-converter': dataConverter, 'store-only': storeOnly } = args.values;
  return {
    by: by || args.user,
    ...(dataConverter === undefined ? {} : { dataConverter }),
    ...(storeOnly ? { storeOnly } : {}),
  };
}

/** `--applied` or `--not-applied`, exactly one. */
export function applied(args: ResolveArgs): boolean {
  if (args.values.applied === args.values['not-applied'])
    args.fail('give exactly one of --applied or --not-applied');
  return args.values.applied === true;
}

/** `--reason`, trimmed: required, since the audit trail says why a key was decided. */
export function reason(args: ResolveArgs): string {
  return args.values.reason?.trim() || args.fail('--reason is required: say why you judged it so');
}
