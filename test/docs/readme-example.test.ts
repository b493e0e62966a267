import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../support/temporal.js';

/** The README's examples are code users paste; each one is run exactly as written. */
function readmeBlock(heading: string): string {
  const readme = readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
  const section = readme.split(/^## /m).find((s) => s.startsWith(heading));
  const block = section?.match(/```ts\n([\s\S]*?)```/)?.[1];
  if (!block) throw new Error(`README has no ts block under "## ${heading}"`);
  return block;
}

describe('README', () => {
  it('the Runner + MemoryStore example runs and prints applied then replayed', () => {
    const code = readmeBlock('The Runner on its own')
      .replaceAll(
        "from 'sideeffect'",
        `from ${JSON.stringify(path.join(REPO_ROOT, 'src/index.ts'))}`,
      )
      .replaceAll(
        "from 'sideeffect/store'",
        `from ${JSON.stringify(path.join(REPO_ROOT, 'src/store/index.ts'))}`,
      );
    const dir = path.join(REPO_ROOT, 'test-output');
    mkdirSync(dir, { recursive: true });
    const file = path.join(dir, 'readme-runner-example.ts');
    writeFileSync(file, code);
    expect(code.split('\n').length).toBeLessThanOrEqual(20);
    const out = execFileSync(process.execPath, ['--import', 'tsx', file], {
      cwd: REPO_ROOT,
      encoding: 'utf8',
    });
    expect(out.trim()).toBe('applied replayed');
  });
});
