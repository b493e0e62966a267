/**
 * The SDK peer range is exactly what is tested (issue #32): package.json's range, the SDK matrix
 * of test/e2e/sdk-matrix.test.ts, the plugin's refusal of unfixed bundlers and the table of
 * docs/production.md say the same thing.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
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

describe('the SDK peer range', () => {
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
