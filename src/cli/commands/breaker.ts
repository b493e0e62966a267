import { defineCommand } from '../command.js';
import { cliIdentity } from '../temporal.js';
import { EXIT } from '../usage.js';
import { jsonBreaker } from './breakers.js';

/**
 * `sideeffect breaker open|close GROUP --reason ...`: a person's word on a provider group, which
 * wins over the thresholds until the next transition. Who said so is recorded as for verdicts.
 */
export const breaker = defineCommand({
  name: 'breaker',
  summary: "open or close a provider group's breaker by hand, with a reason",
  usage: ['sideeffect breaker <action> <group> --reason TEXT [--by NAME] [-o json]'],
  about: `open: no new attempt of the group starts until a person closes it (the thresholds no longer
re-close it). close: new attempts start again at once, and the uncertain outcomes counted so far
no longer count. Attempts in flight, replays and verdicts are not touched. The reason, --by (default
cli:<your OS user>) and this client's identity are recorded in the breaker's history, and the
database role in breaker_events.db_user.`,
  argument: {
    name: 'action',
    description: 'open or close, then the group (by default the effect name)',
  },
  options: {
    reason: {
      type: 'string',
      arg: 'TEXT',
      description: 'required: what you checked and found (the provider status page, a test charge)',
    },
    by: {
      type: 'string',
      arg: 'NAME',
      description: 'who decided, recorded with the move (default cli:<your OS user>)',
    },
  },
  notes: `Exit codes: 0 moved; 1 refused by the store (bad group or reason); 2 usage.`,
  parse(args) {
    const [action, group, ...rest] = args.positionals;
    if (action !== 'open' && action !== 'close')
      args.fail('expected open or close, then the group');
    if (!group) args.fail('expected the group after open or close');
    if (rest.length > 0) args.fail(`unexpected argument "${rest[0]}"`);
    const { reason, by } = args.values;
    if (!reason?.trim()) args.fail('--reason is required: say what you checked');
    return {
      group: group!,
      state: action === 'open' ? ('open' as const) : ('closed' as const),
      reason: reason!,
      by: by || args.user,
    };
  },
  async run({ group, ...command }, ctx) {
    const { record, transition } = await ctx
      .database()
      .store.setBreaker(group, { ...command, identity: cliIdentity() });
    ctx.print(
      `breaker "${record.group}" ${transition ? `${transition.from} -> ` : ''}${record.state} by ${record.by}: ${record.reason}`,
      jsonBreaker(record),
    );
    return EXIT.ok;
  },
});
