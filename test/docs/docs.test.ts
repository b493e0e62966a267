import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { searchAttributeNames } from '../../src/activities/search-attributes.js';
import { searchAttributeCreateCommand } from '../../src/worker/search-attributes.js';
import { REPO_ROOT } from '../support/temporal.js';
import { codeBlocks, docPages } from './blocks.js';

// Every TypeScript block type-checks against the library: `npm run typecheck`
// (scripts/typecheck-docs.ts), not here, since that one tsc run was most of the unit tier's time.
describe('the docs', () => {
  it('docs/index.md links every page of docs/', () => {
    const index = readFileSync(path.join(REPO_ROOT, 'docs/index.md'), 'utf8');
    const pages = readdirSync(path.join(REPO_ROOT, 'docs')).filter(
      (name) => name.endsWith('.md') && name !== 'index.md',
    );
    expect(pages.filter((page) => !index.includes(`](${page})`))).toEqual([]);
  });

  it('every relative link of the README and docs/ points at a file that exists', () => {
    const broken: string[] = [];
    for (const page of docPages()) {
      const text = readFileSync(path.join(REPO_ROOT, page), 'utf8');
      for (const [, target] of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue;
        const file = path.join(REPO_ROOT, path.dirname(page), target!);
        try {
          readFileSync(file);
        } catch {
          broken.push(`${page}: ${target}`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('docs/troubleshooting.md has an entry for every error code', () => {
    const errors = readFileSync(path.join(REPO_ROOT, 'src/core/error-codes.ts'), 'utf8');
    const union = errors.match(/export type SideEffectErrorCode =([^;]+);/)![1]!;
    const codes = [...union.matchAll(/'([A-Z_]+)'/g)].map((m) => m[1]!);
    expect(codes.length).toBeGreaterThan(10);
    const failures = readFileSync(path.join(REPO_ROOT, 'src/protocol/failures.ts'), 'utf8');
    const types = [...failures.matchAll(/: '(SideEffect\w+)'/g)].map((m) => m[1]!);
    const page = readFileSync(path.join(REPO_ROOT, 'docs/troubleshooting.md'), 'utf8');
    const headings = page.split('\n').filter((line) => line.startsWith('### '));
    const missing = [...codes, ...types].filter(
      (name) => !headings.some((heading) => heading.includes(`\`${name}\``)),
    );
    expect(missing).toEqual([]);
  });

  it("testing.md tests the getting-started app: its effects.ts and workflows.ts are that page's, and it says what to install", () => {
    const started = new Map(
      codeBlocks('docs/getting-started.md', 'ts').map((block) => [block.file, block.code]),
    );
    const testing = codeBlocks('docs/testing.md', 'ts').filter((block) => block.file);
    expect(testing.map((block) => block.file)).toEqual([
      'effects.ts',
      'workflows.ts',
      'checkout.test.ts',
    ]);
    for (const block of testing.slice(0, 2))
      expect(block.code.replace(/^\/\/ file: /, '// '), block.file).toBe(started.get(block.file));
    expect(testing[2]!.code).toContain("from './effects.js'");
    const installs = codeBlocks('docs/testing.md', 'sh').map((block) => block.code);
    expect(installs.join('\n')).toMatch(/^npm install -D @temporalio\/testing vitest$/m);
  });

  it('writing-effects says when a killed attempt turns uncertain, from the defaults in the code', () => {
    const page = readFileSync(path.join(REPO_ROOT, 'docs/writing-effects.md'), 'utf8');
    const source = (file: string) => readFileSync(path.join(REPO_ROOT, 'src', file), 'utf8');
    // Each default the formula uses, as the page states it and as the code sets it.
    expect(page).toContain('`heartbeatTimeout` 1 minute');
    expect(source('workflows/side-effect.ts')).toContain("heartbeatTimeout: '1 minute'");
    expect(page).toContain('`sweepEveryMs` 60 s');
    expect(source('worker/plugin.ts')).toContain('sweepEveryMs ?? 60_000');
    expect(page).toContain('± 20 %');
    expect(source('worker/sweeper.ts')).toContain('const JITTER = 0.2;');
    expect(page).toContain('at most `ttlMs / 3` before the kill');
    expect(source('worker/lifecycle.ts')).toContain('Math.floor(ttlMs / 3)');
    expect(page).toMatch(/kill \+ heartbeatTimeout \+ 1 s − \(0 to ttlMs\/3\)/);
    expect(page).toMatch(/at most kill \+ ttlMs \+ 1\.2 × sweepEveryMs/);
  });

  it('getting-started shows the search-attribute command the worker would print', () => {
    const sh = codeBlocks('docs/getting-started.md', 'sh')
      .map((block) => block.code)
      .join('\n');
    expect(sh).toContain(searchAttributeCreateCommand('default', [...searchAttributeNames]));
  });

  it("the README's app is the getting-started page's, file for file (so it is run end to end too)", () => {
    const started = new Map(
      codeBlocks('docs/getting-started.md', 'ts').map((block) => [block.file, block.code]),
    );
    const readme = codeBlocks('README.md', 'ts').filter((block) => started.has(block.file));
    expect(readme.map((block) => block.file)).toEqual([
      'effects.ts',
      'worker.ts',
      'workflows.ts',
      'client.ts',
    ]);
    for (const block of readme) expect(block.code, block.file).toBe(started.get(block.file));
  });
});
