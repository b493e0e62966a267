import { keepsPendingVerdicts } from '../../core/store.js';
import { defineCommand } from '../command.js';
import { iso } from '../format.js';
import { cliIdentity } from '../temporal.js';
import { EXIT } from '../usage.js';

/**
 * `sideeffect withdraw <key> --verdict ID`: takes back a verdict pending in the store for a
 * worker's check. A verdict sent through the workflow is refused while another is pending on the
 * same attempt (it would be judged first, unseen), so a person who finds a wrong pending verdict
 * needs a way to take it back before it decides; who did, and why, is recorded.
 */
export const withdraw = defineCommand({
  name: 'withdraw',
  summary:
    "take back a verdict pending for a worker's check (show lists them), recorded with who and why",
  usage: ['sideeffect withdraw <key> --verdict ID --reason TEXT [--by NAME] [-o json]'],
  about: `Withdraws pending verdict ID of the key (sideeffect show <key> lists its pending verdicts):
it is never judged, and an event on the key records who withdrew it and why. A verdict already
judged (accepted, refused, late) or withdrawn stays as it is (exit 1).`,
  argument: { name: 'key', description: 'the key the pending verdict is on' },
  options: {
    verdict: {
      type: 'string',
      arg: 'ID',
      description:
        'required: the pending verdict\'s id (the "#N" sideeffect show and the refusal print)',
      parse: (value, { fail }) => {
        const id = Number(value);
        return Number.isSafeInteger(id) && id > 0
          ? id
          : fail('--verdict must be a positive integer');
      },
    },
    reason: {
      type: 'string',
      arg: 'TEXT',
      description: 'required: why it is withdrawn, recorded with it',
    },
    by: {
      type: 'string',
      arg: 'NAME',
      description: 'who withdraws it (default cli:<your OS user>)',
    },
  },
  parse(args) {
    const key = args.one();
    const { verdict, reason, by } = args.values;
    if (verdict === undefined)
      args.fail('--verdict ID is required (sideeffect show KEY lists the ids)');
    if (reason === undefined || reason.trim() === '') args.fail('--reason TEXT is required');
    return { key, id: verdict!, reason: reason!, by: by || args.user };
  },
  async run({ key, id, reason, by }, ctx) {
    const { store } = ctx.database();
    if (!keepsPendingVerdicts(store))
      return ctx.fail('NOT_FOUND', 'this store keeps no pending verdicts', EXIT.refused);
    const answer = await store.withdrawPendingVerdict(key, id, {
      reason,
      by,
      identity: cliIdentity(),
    });
    if (answer === undefined)
      return ctx.fail(
        'NOT_FOUND',
        `no pending verdict #${id} on key "${key}" (sideeffect show "${key}" lists them)`,
        EXIT.refused,
      );
    const { verdict } = answer;
    const json = {
      key,
      id,
      state: verdict.state,
      ...(verdict.why === undefined ? {} : { why: verdict.why }),
      ...(verdict.judgedAt === undefined ? {} : { at: iso(verdict.judgedAt) }),
    };
    if (!answer.withdrawn)
      return ctx.fail(
        'NOT_PENDING',
        `pending verdict #${id} on "${key}" was not withdrawn: it is ${verdict.state} already${verdict.why ? ` (${verdict.why})` : ''}`,
        EXIT.refused,
      );
    ctx.print(
      `withdrew pending verdict #${id} on "${key}" (${verdict.applied ? 'applied' : 'not applied'}, by ${verdict.by ?? 'unknown'}): it will not be judged`,
      json,
    );
    return EXIT.ok;
  },
});
