import { keepsPendingVerdicts } from '../../core/store.js';
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
  about: `Lists keys, newest change first (default limit ${DEFAULT_LIMIT}); PENDING counts the verdicts pending on an uncertain key's attempt (sideeffect show lists them).`,
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
    const { store } = ctx.database();
    const records = await store.list(filter);
    const uncertain = records.filter((r) => r.state === 'uncertain').map((r) => r.key);
    const pending =
      keepsPendingVerdicts(store) && uncertain.length > 0
        ? await store.pendingVerdictCounts(uncertain)
        : new Map<string, number>();
    ctx.print(
      printList(records, pending),
      records.map((r) => {
        const n = pending.get(r.key);
        return n === undefined ? jsonRecord(r) : { ...jsonRecord(r), pendingVerdicts: n };
      }),
    );
    return EXIT.ok;
  },
});
