/**
 * The SDK peer range is exactly what is tested (issue #32), and package.json is the one place it
 * is written: the module the plugin's refusal of unfixed bundlers reads is generated from it, and
 * the SDK matrix of test/e2e/sdk-matrix.test.ts (with test/e2e/user-app.test.ts, which takes its
 * ends), the table of docs/production.md, the releases it and docs/troubleshooting.md say are
 * left out, and the first minor they say is untested are checked against it here.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderSdkRangeModule, SDK_RANGE_MODULE } from '../../scripts/sdk-range-module.js';
import { UnsupportedSdkError } from '../../src/core/errors.js';
import { bundlerFixFor, bundlerIsolationError } from '../../src/worker/sdk-check.js';
import { PUBLISHED, SDK_MATRIX, satisfies, UNFIXED, UNINSTALLABLE } from '../support/sdk-matrix.js';
import { REPO_ROOT } from '../support/temporal.js';

const manifest = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as {
  peerDependencies: Record<string, string>;
};
const SDK_PACKAGES = ['activity', 'client', 'common', 'worker', 'workflow'];
const range = manifest.peerDependencies['@temporalio/worker']!;
const minor = (version: string) => version.split('.').slice(0, 2).join('.');

/** The releases a piece of prose names: `1.16.0 to 1.16.2` and `1.16.0-1.16.2` span PUBLISHED. */
function releasesIn(text: string): string[] {
  return [...text.matchAll(/(\d+\.\d+\.\d+)(?:(?:-| to )(\d+\.\d+\.\d+))?/g)].flatMap(
    ([, from, to]) => {
      if (to === undefined) return [from!];
      const all: readonly string[] = PUBLISHED;
      return all.slice(all.indexOf(from!), all.indexOf(to) + 1);
    },
  );
}

/** The first release above the range (its last `<X.Y.Z`). */
const above = range.split('<').at(-1)!.trim();
/** The published releases below the range's top that it leaves out, oldest first. */
const leftOut = PUBLISHED.filter((v) => !satisfies(v, range) && satisfies(v, `>=0.0.0 <${above}`));

describe('the SDK peer range', () => {
  it(`reaches the plugin's check through ${SDK_RANGE_MODULE} (else: npm run sdk-range:generate)`, () => {
    const committed = readFileSync(path.join(REPO_ROOT, SDK_RANGE_MODULE), 'utf8');
    expect(committed).toBe(renderSdkRangeModule(REPO_ROOT));
  });

  it('is one range for the five SDK packages', () => {
    for (const name of SDK_PACKAGES)
      expect(manifest.peerDependencies[`@temporalio/${name}`], name).toBe(range);
  });

  it('is tested on the oldest and newest installable patch of every minor it admits', () => {
    const admitted = PUBLISHED.filter((v) => satisfies(v, range));
    expect(admitted.filter((v) => UNINSTALLABLE.includes(v))).toEqual([]);
    const ends = [...new Set(admitted.map(minor))].flatMap((m) => {
      const patches = admitted.filter((v) => minor(v) === m);
      return [...new Set([patches[0]!, patches.at(-1)!])];
    });
    expect(SDK_MATRIX.map(({ sdk }) => sdk)).toEqual(ends);
    for (const { envconfig } of SDK_MATRIX)
      expect(satisfies(envconfig, manifest.peerDependencies['@temporalio/envconfig']!)).toBe(true);
  });

  it('admits every release whose bundler has the webpack fix, and none the plugin refuses', () => {
    for (const version of PUBLISHED) {
      if (UNINSTALLABLE.includes(version)) continue;
      expect(satisfies(version, range), version).toBe(bundlerFixFor(version) === undefined);
    }
    expect(bundlerFixFor(UNFIXED.sdk)).toBe(UNFIXED.fixedIn);
    expect(bundlerFixFor('1.19.0')).toBe('1.20.1');
    expect(bundlerFixFor('1.20.0')).toBe('1.20.1');
    expect(bundlerFixFor('1.13.2')).toBe('1.15.1');
    // 1.14.2 has the fix: left out of the range for another bug, not refused for this one.
    expect(bundlerFixFor('1.14.1')).toBe('1.14.2');
    expect(bundlerFixFor('1.14.2')).toBeUndefined();
    // Newer than the range: untested, which npm's peer check says, not a missing fix.
    expect(bundlerFixFor('1.25.0')).toBeUndefined();
  });

  it('leaves out what docs/production.md and docs/troubleshooting.md say it leaves out', () => {
    const production = readFileSync(path.join(REPO_ROOT, 'docs/production.md'), 'utf8');
    const notes = production.slice(
      production.indexOf('Left out:'),
      production.indexOf('**Activity names.**'),
    );
    const heads = [...notes.matchAll(/^- \*\*(.+?)\*\*/gm)].map((m) => m[1]!);
    const named = heads.flatMap(releasesIn).filter((v) => PUBLISHED.includes(v as never));
    expect([...new Set(named)].sort(), 'the published releases it names').toEqual(
      [...leftOut].sort(),
    );
    expect(heads, 'the first untested minor').toContain(`${minor(above)} and later`);
    // The refusal's cause lists the releases the plugin refuses that npm can install.
    const troubleshooting = readFileSync(path.join(REPO_ROOT, 'docs/troubleshooting.md'), 'utf8');
    const cause = troubleshooting.slice(troubleshooting.indexOf('### `UNSUPPORTED_SDK`'));
    const refused = releasesIn(cause.slice(0, cause.indexOf('\n\n', cause.indexOf('Cause:'))));
    for (const version of leftOut.filter((v) => !UNINSTALLABLE.includes(v)))
      expect(refused, version).toContain(version);
    for (const version of refused) expect(leftOut, version).toContain(version);
  });

  it('is what the table of docs/production.md says, with the matrix as tested', () => {
    const doc = readFileSync(path.join(REPO_ROOT, 'docs/production.md'), 'utf8');
    const row = doc.split('\n').find((line) => line.startsWith('| `@temporalio/activity`'));
    expect(row).toContain(`\`${range.replaceAll('||', '\\|\\|')}\``);
    expect(row?.split('|').at(-2)?.trim()).toBe(SDK_MATRIX.map(({ sdk }) => sdk).join(', '));
    const envconfig = doc.split('\n').find((line) => line.startsWith('| `@temporalio/envconfig`'));
    expect(envconfig).toContain(`\`${manifest.peerDependencies['@temporalio/envconfig']}\``);
  });
});

describe('a prebuilt workflowBundle', () => {
  const fixed = 'var __webpack_module_cache__ = globalThis.__webpack_module_cache__;';
  const unfixed = 'const __webpack_module_cache__ = {};';
  const installed = { worker: '1.17.4', webpack: '5.113.0' };

  it('built by a bundler without the fix is refused, unless reuseV8Context is off', () => {
    const error = bundlerIsolationError({ workflowBundle: { code: unfixed } }, installed);
    expect(error).toBeInstanceOf(UnsupportedSdkError);
    expect(error).toMatchObject({ code: 'UNSUPPORTED_SDK', fixedIn: '1.17.5' });
    expect(error?.message).toContain('reuseV8Context: false');
    expect(
      bundlerIsolationError(
        { workflowBundle: { code: unfixed }, reuseV8Context: false },
        installed,
      ),
    ).toBeUndefined();
  });

  it('built by a fixed bundler (or under webpack < 5.108) runs, whatever SDK bundles here', () => {
    expect(bundlerIsolationError({ workflowBundle: { code: fixed } }, installed)).toBeUndefined();
  });

  it('absent, an installed bundler without the fix is refused, unless its webpack predates 5.108', () => {
    expect(bundlerIsolationError({}, installed)).toMatchObject({ installed: '1.17.4' });
    expect(bundlerIsolationError({}, { worker: '1.17.4', webpack: '5.107.2' })).toBeUndefined();
    expect(bundlerIsolationError({}, { worker: '1.17.5', webpack: '5.113.0' })).toBeUndefined();
  });
});
