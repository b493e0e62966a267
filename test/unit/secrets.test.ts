import { describe, expect, it } from 'vitest';
import { environment } from '../../src/cli/environment.js';
import { main } from '../../src/cli/main.js';

/** Nothing answers at either address, and both carry a password that must never be printed. */
const SECRET = 'secretpw';

describe('no password in any output', () => {
  it('the CLI masks the connection strings it names in errors, human and --json', async () => {
    const env = environment({
      DATABASE_URL: `postgres://ops:${SECRET}@127.0.0.1:1/none`,
      TEMPORAL_ADDRESS: `ops:${SECRET}@127.0.0.1:1`,
    });
    for (const json of [[], ['--json']]) {
      const lines: string[] = [];
      const code = await main(
        ['resolve', 'k', '--not-applied', '--reason', 'checked', '--fence', '1', ...json],
        { out: (line) => lines.push(line), err: (line) => lines.push(line) },
        env,
      );
      const printed = lines.join('\n');
      expect(code).toBe(3);
      expect(printed).toContain(
        'Temporal at ops:***@127.0.0.1:1 (namespace default) does not answer',
      );
      expect(printed).not.toContain(SECRET);
    }
  });
});
