import { storeStats } from '../../store/postgres/index.js';
import { defineCommand } from '../command.js';
import { printStats } from '../format.js';
import { EXIT } from '../usage.js';

/** `sideeffect stats`: how big the uncertain backlog is, and who decides it how fast. */
export const stats = defineCommand({
  name: 'stats',
  summary: 'uncertain backlog, who decides and how fast, from the store',
  usage: ['sideeffect stats [-o json]'],
  about: `From the store: uncertain keys now and the oldest one's age, keys by state, uncertain attempts,
and for resolved ones who decided (probe:<effect>, cli:<user>, a person), which verdict and
how long it took from uncertain to verdict.`,
  options: {},
  parse: () => ({}),
  async run(_, ctx) {
    const found = await storeStats(ctx.database().pool, { schema: ctx.schema });
    ctx.print(printStats(found), found);
    return EXIT.ok;
  },
});
