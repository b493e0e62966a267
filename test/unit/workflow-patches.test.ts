import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  bundledCompatibleWith,
  compatibleWithValue,
  heldFor,
  heldPatches,
  workflowPatches,
} from '../../src/protocol/patches.js';

/**
 * The patch registry is what `compatibleWith` holds patches by: a `patched()` call that bypasses
 * it, or a patch missing from it or from docs/patches.md, would slip a marker a previous version
 * cannot replay into a rollout that was meant to be safe.
 */
const WORKFLOWS = fileURLToPath(new URL('../../src/workflows/', import.meta.url));
const SRC = fileURLToPath(new URL('../../src/', import.meta.url));
const PATCHES_DOC = fileURLToPath(new URL('../../docs/patches.md', import.meta.url));

describe('workflow patch registry', () => {
  it('every patched() call of the library goes through takePatch()', () => {
    const direct = readdirSync(WORKFLOWS)
      .filter((name) => name.endsWith('.ts') && name !== 'patch.ts')
      .filter((name) =>
        /\bpatched\(|deprecatePatch\(/.test(readFileSync(WORKFLOWS + name, 'utf8')),
      );
    expect(direct).toEqual([]);
  });

  it('lists every registered patch in docs/patches.md with the release that introduced it', () => {
    const doc = readFileSync(PATCHES_DOC, 'utf8');
    for (const { id, since } of Object.values(workflowPatches))
      expect(doc, id).toMatch(new RegExp(`\\| \`${id.replace(/\./g, '\\.')}\` \\| ${since} \\|`));
  });

  it('writes each id once, in the registry, under the name its id gives', () => {
    const ids = Object.values(workflowPatches).map((patch) => patch.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const [name, { id }] of Object.entries(workflowPatches))
      expect(name, id).toBe(
        id.replace(/^sideeffect[.-]/, '').replace(/-(\w)/g, (_, c: string) => c.toUpperCase()),
      );
    const elsewhere = (readdirSync(SRC, { recursive: true }) as string[])
      .filter((file) => file.endsWith('.ts') && file !== join('protocol', 'patches.ts'))
      .filter((file) =>
        ids.some((id) => readFileSync(join(SRC, file), 'utf8').includes(`'${id}'`)),
      );
    expect(elsewhere).toEqual([]);
  });

  it('holds exactly the patches of later minors', () => {
    expect(heldFor('0.1', 'verdictContext')).toBe(true);
    expect(heldFor('0.2', 'verdictContext')).toBe(false);
    expect(heldFor('1.0', 'verdictContext')).toBe(false);
    expect(heldPatches('0.1')).toEqual(Object.keys(workflowPatches));
    expect(heldPatches('0.2')).toEqual(
      Object.entries(workflowPatches)
        .filter(([, { since }]) => since !== '0.2')
        .map(([name]) => name),
    );
    // Every patch 0.3.0 shipped is known to 0.3: only later minors' are held.
    expect(heldPatches('0.3')).toEqual(
      Object.entries(workflowPatches)
        .filter(([, { since }]) => since !== '0.2' && since !== '0.3')
        .map(([name]) => name),
    );
  });

  it('reads the setting back from a bundle, and nothing from one without it', () => {
    const reading = "const mark = 'sideeffect-compatible-with:';";
    expect(bundledCompatibleWith(`${reading}\nconst v = "${compatibleWithValue('0.1')}";`)).toBe(
      '0.1',
    );
    expect(bundledCompatibleWith(reading)).toBeUndefined();
  });
});
