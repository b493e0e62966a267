import { readFileSync } from 'node:fs';
import type { BundleOptions, WorkerOptions, WorkflowBundleOption } from '@temporalio/worker';
import { InvalidActionError } from '../core/errors.js';
import {
  bundledCompatibleWith,
  COMPATIBLE_WITH_GLOBAL,
  type CompatibleWith,
  compatibleVersions,
  compatibleWithValue,
  isCompatibleWith,
} from '../protocol/patches.js';

type BundlerOptions = NonNullable<WorkerOptions['bundlerOptions']>;

/** Names the webpack plugin, so the Worker's bundler hook and the plugin's own add it once. */
const DEFINE_PLUGIN = 'sideeffect-compatible-with';

/**
 * The `compatibleWith` option, checked: a version no release of this library records is refused
 * at once rather than holding nothing (a typo would leave the rollout unprotected).
 */
export function checkedCompatibleWith(value: unknown): CompatibleWith | undefined {
  if (value === undefined || isCompatibleWith(value)) return value;
  throw new InvalidActionError(
    'compatibleWith',
    `${JSON.stringify(value)} is not a version this release can stay compatible with; use one of ${compatibleVersions.map((v) => `'${v}'`).join(', ')} (the minor version you may roll back to), or leave it out once no worker of an older version will run again`,
  );
}

/**
 * `bundlerOptions` (the host's own webpack hook kept) whose bundle holds the workflow patches
 * `version` does not know: the workflow code reads the setting from a global webpack defines, as
 * the effect calls run in the host's bundle, where no worker option reaches.
 */
export function defineCompatibleWith(
  bundlerOptions: BundlerOptions | undefined,
  version: CompatibleWith | undefined,
): BundlerOptions | undefined {
  if (version === undefined) return bundlerOptions;
  const hook = bundlerOptions?.webpackConfigHook;
  return {
    ...bundlerOptions,
    webpackConfigHook(given) {
      const config = hook ? hook(given) : given;
      const plugins = config.plugins ?? [];
      if (plugins.some((plugin) => (plugin as { name?: string } | null)?.name === DEFINE_PLUGIN))
        return config;
      const plugin: NonNullable<typeof config.plugins>[number] & { name: string } = {
        name: DEFINE_PLUGIN,
        apply(compiler) {
          // The bundler's own webpack, so no second copy is loaded.
          new compiler.webpack.DefinePlugin({
            [COMPATIBLE_WITH_GLOBAL]: JSON.stringify(compatibleWithValue(version)),
          }).apply(compiler);
        },
      };
      return { ...config, plugins: [...plugins, plugin] };
    },
  };
}

/** `bundleWorkflowCode`'s options with the setting defined (the plugin's bundler hook). */
export function bundleOptionsCompatibleWith(
  options: BundleOptions,
  version: CompatibleWith | undefined,
): BundleOptions {
  return { ...options, ...defineCompatibleWith(options, version) };
}

/**
 * Why a prebuilt bundle cannot run with this setting, or undefined: a bundle built with another
 * setting (or none) would emit commands the plugin's option does not promise, silently.
 */
export function bundleCompatibilityError(
  bundle: WorkflowBundleOption,
  version: CompatibleWith | undefined,
): InvalidActionError | undefined {
  const code = 'code' in bundle ? bundle.code : readFileSync(bundle.codePath, 'utf8');
  const bundled = bundledCompatibleWith(code);
  if (bundled === version) return undefined;
  const built =
    bundled === undefined ? 'without compatibleWith' : `with compatibleWith '${bundled}'`;
  const wanted = version === undefined ? 'none' : `'${version}'`;
  return new InvalidActionError(
    'workflowBundle',
    `the Worker's workflowBundle was built ${built} but SideEffectPlugin's compatibleWith is ${wanted}: build the bundle with the same plugin, \`bundleWorkflowCode({ workflowsPath, plugins: [sideEffectPlugin] })\`, or let the Worker bundle workflowsPath`,
  );
}
