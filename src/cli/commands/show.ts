import { defineCommand } from '../command.js';
import { iso, jsonRecord, jsonResult, printKey } from '../format.js';
import { EXIT } from '../usage.js';

/** Pending verdicts a page: a screenful; the next page is asked for with --verdicts-after. */
const PAGE = 20;

/** `sideeffect show <key>`: everything the store knows about one key, and what to run next. */
export const show = defineCommand({
  name: 'show',
  summary: 'state, fence, result, reason and the event history of a key',
  usage: ['sideeffect show <key> [--verdicts-after ID] [-o json]'],
  about:
    "Shows a key's state, fence, result, reason and every transition with who made it and why; for an uncertain key, the resolve commands that decide it, and the pending verdicts (waiting for a worker's check).",
  argument: { name: 'key', description: 'the idempotency key, as the effect declared it' },
  options: {
    'verdicts-after': {
      type: 'string',
      arg: 'ID',
      description: `the next page of pending verdicts: those after ID (${PAGE} a page, oldest first)`,
      parse: (value, { fail }) => {
        const id = Number(value);
        return Number.isSafeInteger(id) && id >= 0
          ? id
          : fail('--verdicts-after must be a non-negative integer');
      },
    },
  },
  parse: (args) => ({ key: args.one(), afterId: args.values['verdicts-after'] ?? 0 }),
  async run({ key, afterId }, ctx) {
    const { store } = ctx.database();
    const record = await store.inspect(key);
    if (!record)
      return ctx.fail(
        'NOT_FOUND',
        `no key "${key}" in schema ${ctx.schema} (check --schema / SIDEEFFECT_SCHEMA and the database)`,
        EXIT.refused,
      );
    const events = await store.events(key);
    const page = await store.pendingVerdicts(key, { afterId, limit: PAGE + 1 });
    const pending = page.slice(0, PAGE);
    const more = page.length > PAGE ? pending.at(-1)!.id : undefined;
    ctx.print(printKey(record, events, pending, more), {
      ...jsonRecord(record),
      events: events.map((event) => ({ ...event, at: iso(event.at) })),
      pendingVerdicts: pending.map(({ result, at, judgedAt, ...verdict }) => ({
        ...verdict,
        ...(result ? { result: jsonResult(result) } : {}),
        at: iso(at),
        ...(judgedAt === undefined ? {} : { judgedAt: iso(judgedAt) }),
      })),
      ...(more === undefined ? {} : { morePendingVerdictsAfter: more }),
    });
    return EXIT.ok;
  },
});
