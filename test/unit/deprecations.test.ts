/**
 * Deprecated names cannot linger. Every `@deprecated` tag in src says since which release and in
 * which release the name goes (`@deprecated since 0.2.0, removed in 0.3.0: use X`), and this file
 * fails once package.json's version reaches a removal release: the name is removed in the release
 * that promised it, or its tag is moved on purpose, in review.
 *
 * scripts/deprecated-uses.ts refuses a use of a deprecated name anywhere in the repository but
 * this file.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Runner } from '../../src/core/runner.js';
import { MemoryStore } from '../../src/store/memory.js';

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));
const PACKAGE = fileURLToPath(new URL('../../package.json', import.meta.url));

/** One `@deprecated` tag: where, on which name, and what it says. */
interface Deprecation {
  at: string;
  name: string;
  text: string;
}

const TAG = /^@deprecated since (\d+\.\d+\.\d+), removed in (\d+\.\d+\.\d+): \S/;

/** The `@deprecated` tags of one source file, each with the name declared right after its comment. */
function deprecationsIn(file: string, source: string): Deprecation[] {
  const found: Deprecation[] = [];
  for (const match of source.matchAll(/\/\*\*((?:(?!\*\/)[\s\S])*?)\*\/\s*([^\n]*)/g)) {
    const comment = match[1]!;
    const tag = comment.indexOf('@deprecated');
    if (tag < 0) continue;
    const text = comment
      .slice(tag)
      .split('\n')
      .map((line) => line.replace(/^\s*\*\s?/, ''))
      .join(' ')
      .trim();
    const declaration = match[2]!;
    const declared =
      /\b(?:function|const|type|interface|class)\s+(\w+)/.exec(declaration) ??
      /^\s*(?:async\s+)?(\w+)/.exec(declaration);
    const line = source.slice(0, match.index).split('\n').length;
    found.push({ at: `${file}:${line}`, name: declared?.[1] ?? '?', text });
  }
  return found;
}

/** Negative, zero or positive as `a` is below, at or above `b` (x.y.z, numerically). */
function compareVersions(a: string, b: string): number {
  const [x, y] = [a, b].map((v) => v.split('.').map(Number)) as [number[], number[]];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return (x[i] ?? 0) - (y[i] ?? 0);
  return 0;
}

function allDeprecations(): Deprecation[] {
  return (readdirSync(SRC, { recursive: true }) as string[])
    .filter((file) => file.endsWith('.ts') && !file.endsWith('migrations.generated.ts'))
    .flatMap((file) => deprecationsIn(file, readFileSync(join(SRC, file), 'utf8')));
}

describe('deprecations', () => {
  const version: string = JSON.parse(readFileSync(PACKAGE, 'utf8')).version;
  const deprecations = allDeprecations();

  it('finds the deprecated names of src', () => {
    expect(deprecations.map((d) => d.name)).toEqual(expect.arrayContaining(['admit']));
  });

  it('every @deprecated says since when, the release that removes it, and what to use', () => {
    expect(deprecations.filter((d) => !TAG.test(d.text))).toEqual([]);
  });

  it(`none is due: package.json's version (${version}) is below every removal release`, () => {
    const due = deprecations.filter((d) => {
      const [, , removal] = TAG.exec(d.text) ?? [];
      return removal !== undefined && compareVersions(version, removal) >= 0;
    });
    expect(due, 'remove these names (and their docs), or move their removal on purpose').toEqual(
      [],
    );
  });

  it('reads a tag and compares versions as the gate needs', () => {
    const source = [
      '/**',
      ' * Old.',
      ' * @deprecated since 0.2.0, removed in 0.3.0: use {@link New}.',
      ' */',
      'export function old(): void {}',
      '/** @deprecated use New */',
      'export const older = 1;',
    ].join('\n');
    const [tagged, untagged] = deprecationsIn('x.ts', source);
    expect(tagged).toMatchObject({ at: 'x.ts:1', name: 'old' });
    expect(TAG.test(tagged!.text)).toBe(true);
    expect(untagged).toMatchObject({ at: 'x.ts:6', name: 'older' });
    expect(TAG.test(untagged!.text)).toBe(false);
    expect(compareVersions('0.2.9', '0.3.0')).toBeLessThan(0);
    expect(compareVersions('0.3.0', '0.3.0')).toBe(0);
    expect(compareVersions('0.10.0', '0.3.0')).toBeGreaterThan(0);
    expect(compareVersions('1.0.0', '0.3.0')).toBeGreaterThan(0);
  });
});

describe('deprecated names still do what their replacements do', () => {
  it('ExecuteOptions.admit is the first half of breaker: a refusal frees the key, nothing applied', async () => {
    const store = new MemoryStore();
    const runner = new Runner(store, { ttlMs: 1_000 });
    const refusal = new Error('paused');
    let applied = 0;
    const execution = await runner.execute(
      { key: 'k', resource: 'r' },
      async () => {
        applied += 1;
        return { payload: new Uint8Array() };
      },
      {
        admit: () => {
          throw refusal;
        },
      },
    );
    expect(execution).toEqual({ outcome: 'failed', error: refusal });
    expect(applied).toBe(0);
    expect((await store.inspect('k'))?.state).toBe('free');
  });
});
