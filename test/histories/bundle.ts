/**
 * The frozen callers (./workflows.ts) bundled as a Worker with `SideEffectPlugin` bundles them:
 * with `compatibleWith` the plugin's bundler hook builds the setting in, as for a prebuilt bundle.
 * Bundled once per setting and test file: each bundling takes seconds, more under load.
 */
import path from 'node:path';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { CompatibleWith } from '../../src/protocol/patches.js';
import { MemoryStore } from '../../src/store/memory.js';
import { SideEffectPlugin } from '../../src/worker/index.js';
import { HISTORIES_DIR } from './manifest.js';
import { effects } from './scenarios.js';

/** Drops the bundler's progress lines. */
export const quiet = { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} };

const bundles = new Map<CompatibleWith | undefined, Promise<WorkflowBundleWithSourceMap>>();

export function bundleCallers(
  compatibleWith?: CompatibleWith,
): Promise<WorkflowBundleWithSourceMap> {
  let bundle = bundles.get(compatibleWith);
  if (!bundle) {
    bundle = bundleWorkflowCode({
      workflowsPath: path.join(HISTORIES_DIR, 'workflows.ts'),
      logger: quiet,
      plugins: [
        new SideEffectPlugin({
          store: new MemoryStore(),
          effects,
          ttlMs: 5_000,
          ...(compatibleWith ? { compatibleWith } : {}),
        }),
      ],
    });
    bundles.set(compatibleWith, bundle);
  }
  return bundle;
}
