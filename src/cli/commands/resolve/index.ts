import { defineCommand } from '../../command.js';
import { loadDataConverter } from '../../data-converter.js';
import { type ByResource, parseByResource, runByResource } from './by-resource.js';
import { type FromFile, parseFromFile, runFromFile } from './from-file.js';
import { type OneKey, parseKey, runKey } from './key.js';
import { RESOLVE_OPTIONS } from './options.js';

/**
 * `sideeffect resolve`: a person's verdict on uncertain keys, in the three forms a person meets
 * them: one key they checked (`resolve <key>`), every key of a resource after an outage
 * (`--resource`), or a list made from the downstream's records (`--from-file`).
 */
export const resolve = defineCommand({
  name: 'resolve',
  summary:
    'decide the uncertain attempt N of a key (show prints N; through its ReconcileWorkflow if one runs), or many keys: one verdict for a resource (--resource), one per line (--from-file)',
  usage: [
    'sideeffect resolve <key> --fence N|--any-attempt --applied --result JSON|--not-applied --reason TEXT [--by NAME] [--wait D|--store-only] [-o json]',
    'sideeffect resolve --resource R --any-attempt --applied|--not-applied --reason TEXT [--older-than D] [--newer-than D] [--by NAME] [--dry-run] [-o json]',
    'sideeffect resolve --from-file verdicts.jsonl [--any-attempt] [--by NAME] [--dry-run] [-o json]',
  ],
  about: `Decides an uncertain key after you checked the downstream. If the key's ReconcileWorkflow
(reconcile/<key>) is running, the verdict goes through it, so the waiting workflow continues;
otherwise it is recorded in the store as a pending verdict for a worker's check. The first resolution wins: if someone
resolved the key first, you are told so (exit 1).
With --resource or --from-file it decides many keys after an outage, each through its
ReconcileWorkflow when one runs.`,
  argument: {
    name: 'key',
    description: 'the uncertain key to decide (not with --resource or --from-file)',
  },
  options: RESOLVE_OPTIONS,
  notes: `Many keys: prints decided / already decided / refused / failed. Exit 0 when every verdict was
recorded, 1 when some key was already decided or refused, 3 when some could not be sent (run it
again: decided keys then report "already decided").`,
  parse(args): OneKey | ByResource | FromFile {
    const { resource, 'from-file': file, wait } = args.values;
    if (resource === undefined && file === undefined) return parseKey(args);
    args.none();
    if (wait !== undefined) args.fail('--wait goes with a single key');
    if (resource !== undefined && file !== undefined)
      args.fail('give --resource or --from-file, not both');
    return file !== undefined ? parseFromFile(args, file) : parseByResource(args, resource!);
  },
  async run(params, ctx) {
    const path = params.dataConverter ?? ctx.env.dataConverterPath;
    const dataConverter = path ? await loadDataConverter(path, ctx.env.cwd) : undefined;
    if (params.form === 'key') return runKey(params, ctx, dataConverter);
    if (params.form === 'by-resource') return runByResource(params, ctx, dataConverter);
    return runFromFile(params, ctx, dataConverter);
  },
});
