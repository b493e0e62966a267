import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The workflow bundle must stay deterministic: src/workflows and what it shares with the
 * activities (src/protocol) import only @temporalio/workflow, the pure parts of src/core, syncx
 * and each other. A Node built-in or pg here would load into every workflow sandbox.
 */
const SRC = fileURLToPath(new URL('../../src/', import.meta.url));
const WORKFLOW_SAFE_CORE = ['types.js', 'verdict.js', 'validate.js', 'errors.js', 'error-codes.js'];

function imports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/(?:^|\n)(?:import|export)[^;]*?from '([^']+)'/g)].map((m) => m[1]!);
}

function allowed(dir: string, specifier: string): boolean {
  if (specifier === '@temporalio/workflow') return true;
  if (!specifier.startsWith('.')) return false;
  const target = path.relative(SRC, path.resolve(path.join(SRC, dir), specifier));
  const [top, ...rest] = target.split(path.sep);
  if (top === 'core') return WORKFLOW_SAFE_CORE.includes(rest.join('/'));
  return top === 'syncx' || top === 'protocol' || (top === 'workflows' && dir === 'workflows');
}

describe('workflow-safe modules', () => {
  for (const dir of ['workflows', 'protocol', 'syncx']) {
    it(`src/${dir} imports only workflow-safe code`, () => {
      const bad: string[] = [];
      for (const name of readdirSync(path.join(SRC, dir)).filter((f) => f.endsWith('.ts'))) {
        for (const specifier of imports(path.join(SRC, dir, name))) {
          if (!allowed(dir, specifier)) bad.push(`${dir}/${name}: ${specifier}`);
        }
      }
      expect(bad).toEqual([]);
    });
  }
});
