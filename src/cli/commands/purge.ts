import { defineCommand } from '../command.js';
import { duration, durationProblem } from '../option-checks.js';
import { EXIT } from '../usage.js';

/** `sideeffect purge`: retention for done keys; a purged key is forgotten, so it asks first. */
export const purge = defineCommand({
  name: 'purge',
  summary: 'delete done keys past retention (never uncertain keys or fences)',
  usage: ['sideeffect purge --older-than DURATION [--yes] [--force] [-o json]'],
  about: `Deletes done keys (and their events) last changed more than DURATION ago, e.g. 30d, 1h30m,
"2 days". Uncertain keys and resource fences are never deleted. A purged key is forgotten: a
caller that retries it later runs its effect again.`,
  options: {
    'older-than': {
      type: 'string',
      arg: 'DURATION',
      description: 'required: purge done keys unchanged for longer than this',
      parse: duration,
    },
    yes: {
      type: 'boolean',
      short: 'y',
      description:
        'do not ask for confirmation (required when stdin or stdout is not a terminal: cron, CI)',
    },
    force: {
      type: 'boolean',
      description:
        'allow DURATION below the floor of 7 days, the youngest a done key is purged by default',
    },
  },
  parse(args) {
    const olderThanMs = args.values['older-than'] ?? args.fail(durationProblem('older-than'));
    return { olderThanMs, force: args.values.force === true, yes: args.values.yes === true };
  },
  async run({ olderThanMs, force, yes }, ctx) {
    const { store } = ctx.database();
    if (!yes) {
      if (!ctx.confirm)
        return ctx.fail(
          'USAGE',
          'purge needs --yes when stdin or stdout is not a terminal (nobody to ask for confirmation)',
          EXIT.usage,
        );
      const question = `purge done keys older than ${olderThanMs / 1000} s from schema ${ctx.schema}? They are forgotten: a retry of one runs its effect again. [y/N] `;
      if (!(await ctx.confirm(question)))
        return ctx.fail('NOT_CONFIRMED', 'purge not confirmed: nothing deleted', EXIT.refused);
    }
    const purged = await store.purge({ olderThanMs, force });
    ctx.print(`purged ${purged} done key(s)`, { purged });
    return EXIT.ok;
  },
});
