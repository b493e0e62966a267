import { defineCommand } from '../command.js';
import { iso, jsonRecord, jsonResult, printKey } from '../format.js';
import { EXIT } from '../usage.js';

/** `sideeffect show <key>`: everything the store knows about one key, and what to run next. */
export const show = defineCommand({
  name: 'show',
  summary: 'state, fence, result, reason and the event history of a key',
  usage: ['sideeffect show <key> [-o json]'],
  about:
    "Shows a key's state, fence, result, reason and every transition with who made it and why; for an uncertain key, the resolve commands that decide it, and the pending verdicts (waiting for a worker's check).",
  argument: { name: 'key', description: 'the idempotency key, as the effect declared it' },
  options: {},
  parse: (args) => ({ key: args.one() }),
  async run({ key }, ctx) {
    const { store } = ctx.database();
    const record = await store.inspect(key);
    if (!record)
      return ctx.fail(
        'NOT_FOUND',
        `no key "${key}" in schema ${ctx.schema} (check --schema / SIDEEFFECT_SCHEMA and the database)`,
        EXIT.refused,
      );
    const events = await store.events(key);
    const pending = await store.pendingVerdicts(key);
    ctx.print(printKey(record, events, pending), {
      ...jsonRecord(record),
      events: events.map((event) => ({ ...event, at: iso(event.at) })),
      pendingVerdicts: pending.map(({ result, at, judgedAt, ...verdict }) => ({
        ...verdict,
        ...(result ? { result: jsonResult(result) } : {}),
        at: iso(at),
        ...(judgedAt === undefined ? {} : { judgedAt: iso(judgedAt) }),
      })),
    });
    return EXIT.ok;
  },
});
