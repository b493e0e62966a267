import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createContext, runInContext } from 'node:vm';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import type * as Syncx from '../../src/syncx/index.js';

const dir = join(import.meta.dirname, '../../src/syncx');
const sources = readdirSync(dir).filter((file) => file.endsWith('.ts'));

/**
 * Loads src/syncx into a bare V8 context that has only ECMAScript built-ins plus
 * AbortController/AbortSignal and console: no timers, no process, no queueMicrotask, no Node
 * modules, which is what Temporal's deterministic workflow sandbox offers.
 */
function loadIntoBareContext(): typeof Syncx {
  const context = createContext({ AbortController, AbortSignal, console });
  const cache = new Map<string, Record<string, unknown>>();
  const load = (file: string): Record<string, unknown> => {
    const cached = cache.get(file);
    if (cached) return cached;
    const exports: Record<string, unknown> = {};
    cache.set(file, exports);
    const { outputText } = ts.transpileModule(readFileSync(join(dir, file), 'utf8'), {
      compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022 },
    });
    const factory = runInContext(`(function (exports, require) {${outputText}\n})`, context);
    factory(exports, (specifier: string) => {
      if (!specifier.startsWith('./')) throw new Error(`non-relative import ${specifier}`);
      return load(specifier.slice(2).replace(/\.js$/, '.ts'));
    });
    return exports;
  };
  return load('index.ts') as unknown as typeof Syncx;
}

describe('syncx runs where only plain JavaScript and promises exist', () => {
  it.each(sources)('%s imports only sibling modules and touches no Node or timer API', (file) => {
    const text = readFileSync(join(dir, file), 'utf8');
    const imports = [...text.matchAll(/from\s+'([^']+)'/g)].map((m) => m[1]!);
    for (const specifier of imports) expect(specifier).toMatch(/^\.\/[\w-]+\.js$/);
    // Code only: the docs may well say "process-wide".
    const code = ts.transpileModule(text, {
      compilerOptions: {
        module: ts.ModuleKind.ESNext,
        target: ts.ScriptTarget.ES2022,
        removeComments: true,
      },
    }).outputText;
    expect(code).not.toMatch(
      /\b(setTimeout|setInterval|setImmediate|queueMicrotask|process|Buffer|require|performance|Date)\b/,
    );
  });

  it('works end to end inside a bare V8 context', async () => {
    const syncx = loadIntoBareContext();
    expect('setTimeout' in globalThis).toBe(true); // the host has timers; the context does not

    const gate = new syncx.Gate(1);
    const release = await gate.acquire();
    const controller = new AbortController();
    const aborted = gate.acquire({ signal: controller.signal });
    const queued = gate.acquire();
    controller.abort('stop');
    await expect(aborted).rejects.toBe('stop');
    release();
    release();
    (await queued)();
    expect(gate.activeCount).toBe(0);

    const keyed = new syncx.KeyedGate(1);
    keyed.tryAcquire('k')!();
    expect(keyed.size).toBe(0);

    const panics: unknown[] = [];
    syncx.onPanic((error) => panics.push(error));
    const result = await syncx.settleAll(2, () => 1, {
      concurrency: 1,
      signal: controller.signal,
    });
    expect(result).toEqual([
      { status: 'rejected', reason: 'stop' },
      { status: 'rejected', reason: 'stop' },
    ]);
    const slots = await syncx.settleAll(
      3,
      (i) => {
        if (i === 1) throw 'x';
        return i;
      },
      { concurrency: 2 },
    );
    expect(slots[0]).toEqual({ status: 'fulfilled', value: 0 });
    expect((slots[1] as PromiseRejectedResult).reason).toBeInstanceOf(syncx.PanicError);
    expect(panics).toHaveLength(1);
  });
});
