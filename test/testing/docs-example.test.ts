/**
 * docs/testing.md's complete test, run as written: its `// file:` blocks are written out with the
 * `sideeffect/*` imports pointed at the sources, and the test file is imported here, so its tests
 * run in this file. A change to `sideeffect/testing` that breaks the page fails `npm test`.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT, temporalCliPath } from '../support/temporal.js';

const page = readFileSync(path.join(REPO_ROOT, 'docs/testing.md'), 'utf8');
const blocks = [...page.matchAll(/```ts\n\/\/ file: (\S+)\n([\s\S]*?)```/g)];
if (blocks.length !== 3) throw new Error(`docs/testing.md has ${blocks.length} file blocks, not 3`);

const dir = path.join(REPO_ROOT, 'test-output', 'testing-doc');
mkdirSync(dir, { recursive: true });
for (const [, name, code] of blocks) {
  const local = code!.replace(
    /from 'sideeffect\/(\w+)'/g,
    (_, entry: string) =>
      `from ${JSON.stringify(path.join(REPO_ROOT, `src/${entry === 'postgres' ? 'store/postgres' : entry}/index.ts`))}`,
  );
  writeFileSync(path.join(dir, name!), local);
}

// The page's test finds the CLI as a user's would; here it is the one the suite uses.
process.env.TEMPORAL_CLI ??= temporalCliPath();
await import(path.join(dir, 'checkout.test.ts'));
