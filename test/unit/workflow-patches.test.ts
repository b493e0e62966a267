import { readdirSync, readFileSync } from 'node:fs';
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
    for (const [id, since] of Object.entries(workflowPatches))
      expect(doc, id).toMatch(new RegExp(`\\| \`${id.replace(/\./g, '\\.')}\` \\| ${since} \\|`));
  });

  it('holds exactly the patches of later minors', () => {
    expect(heldFor('0.1', 'sideeffect-verdict-context')).toBe(true);
    expect(heldFor('0.2', 'sideeffect-verdict-context')).toBe(false);
    expect(heldFor('1.0', 'sideeffect-verdict-context')).toBe(false);
    expect(heldPatches('0.1')).toEqual(Object.keys(workflowPatches));
  });

  it('reads the setting back from a bundle, and nothing from one without it', () => {
    const reading = "const mark = 'sideeffect-compatible-with:';";
    expect(bundledCompatibleWith(`${reading}\nconst v = "${compatibleWithValue('0.1')}";`)).toBe(
      '0.1',
    );
    expect(bundledCompatibleWith(reading)).toBeUndefined();
  });
});
