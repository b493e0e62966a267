import type { KeyState } from '../../core/types.js';
import { defineCommand } from '../command.js';
import { jsonRecord, printList } from '../format.js';
import { oneOf } from '../option-checks.js';
import { EXIT } from '../usage.js';

const STATES: readonly KeyState[] = ['free', 'held', 'applying', 'done', 'uncertain'];
// Outside the definition: a generic call inside it is typed before `parse` and reads as string.
const stateOf = oneOf(STATES, `--state must be one of ${STATES.join(', ')}`);
/** A screenful: enough to see what is going on, few enough to read. */
const DEFAULT_LIMIT = 50;

/** `sideeffect list`: the keys an operator looks at first, newest change first. */
export const list = defineCommand({
  name: 'list',
  summary: 'keys, newest change first (--state uncertain: the ones waiting for a verdict)',
  usage: ['sideeffect list [--state free|held|applying|done|uncertain] [--limit N] [-o json]'],
  about: `Lists keys, newest change first (default limit ${DEFAULT_LIMIT}).`,
  options: {
    state: {
      type: 'string',
      arg: 'S',
      description: `only keys in state S: ${STATES.join(', ')}`,
      parse: stateOf,
    },
    limit: {
      type: 'string',
      arg: 'N',
      description: `at most N keys (default ${DEFAULT_LIMIT})`,
      parse: (value, { fail }) => {
        const limit = Number(value);
        return Number.isSafeInteger(limit) && limit > 0
          ? limit
          : fail('--limit must be a positive integer');
      },
    },
  },
  parse(args) {
    const { state, limit = DEFAULT_LIMIT } = args.values;
    return state ? { state, limit } : { limit };
  },
  async run(filter, ctx) {
    const records = await ctx.database().store.list(filter);
    ctx.print(printList(records), records.map(jsonRecord));
    return EXIT.ok;
  },
});
