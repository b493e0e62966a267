import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { WorkerOptions } from '@temporalio/worker';
import { UnsupportedSdkError } from '../core/errors.js';
import { SDK_PEER_SPANS } from './sdk-range.generated.js';

/**
 * The releases this library supports are those whose workflow bundler routes webpack's module
 * cache through `globalThis.__webpack_module_cache__` whatever keyword webpack declares it with
 * (sdk-typescript#2170), within the minors tested: package.json's peer range, read from the
 * module generated from it. So the first release of a span is the fix for the releases below
 * it; 1.19 has no span (1.19.1 has the fix but cannot be installed), so 1.19.x upgrades to 1.20.1.
 */
const SPANS = SDK_PEER_SPANS.map(([from, below]) => [parse(from)!, parse(below)!] as const);
/**
 * Lines older than the range whose bundler got the fix all the same: the range starts at 1.15.1
 * for another of 1.14's bugs (sdk-typescript#1866), so 1.14.2 is not refused for this one.
 */
const FIXED_BEFORE_RANGE: Record<number, string> = { 14: '1.14.2' };
/** webpack's first release that declares the module cache `const`, which the unfixed bundlers miss. */
const CONST_CACHE_WEBPACK: Version = [5, 108, 0];
/** What a fixed bundler (or an unfixed one under webpack < 5.108) writes into every bundle. */
const CACHE_GLOBAL = 'globalThis.__webpack_module_cache__';

type Version = [number, number, number];

function parse(version: string): Version | undefined {
  const match = /^(\d+)\.(\d+)\.(\d+)/.exec(version);
  return match ? [Number(match[1]), Number(match[2]), Number(match[3])] : undefined;
}

function atLeast(version: Version, floor: Version): boolean {
  for (let i = 0; i < 3; i++) if (version[i] !== floor[i]) return version[i]! > floor[i]!;
  return true;
}

/**
 * The release of `sdk`'s line that has the fix (the first supported release above it), or
 * undefined when `sdk` has it. A release newer than the range was not tested: npm's peer check
 * speaks of it, not this one.
 */
export function bundlerFixFor(sdk: string): string | undefined {
  const version = parse(sdk);
  if (version?.[0] !== 1 || atLeast(version, SPANS.at(-1)![1])) return undefined;
  const fixed = FIXED_BEFORE_RANGE[version[1]];
  if (fixed !== undefined) return atLeast(version, parse(fixed)!) ? undefined : fixed;
  if (SPANS.some(([from, below]) => atLeast(version, from) && !atLeast(version, below)))
    return undefined;
  return SPANS.find(([from]) => !atLeast(version, from))![0].join('.');
}

const CONSEQUENCE =
  "with reuseV8Context (the SDK's default) every workflow of this worker shares one module cache, and a second workflow waiting for a verdict never wakes (sdk-typescript#2170)";

/**
 * Why the Worker's workflow bundle would break the library's waiting workflows, or undefined: a
 * prebuilt bundle whose code lacks the module-cache global (built by an unfixed bundler under
 * webpack >= 5.108), or an installed `@temporalio/worker` without the fix that will bundle with
 * webpack >= 5.108. Nothing to check with `reuseV8Context: false`, where each workflow gets a
 * context of its own.
 */
export function bundlerIsolationError(
  options: Pick<WorkerOptions, 'reuseV8Context' | 'workflowBundle'>,
  installed: { worker: string; webpack: string } | undefined = installedBundler(),
): UnsupportedSdkError | undefined {
  if (options.reuseV8Context === false) return undefined;
  const fixedIn = installed && bundlerFixFor(installed.worker);
  if (options.workflowBundle) {
    const bundle = options.workflowBundle;
    const code = 'code' in bundle ? bundle.code : readFileSync(bundle.codePath, 'utf8');
    if (code.includes(CACHE_GLOBAL)) return undefined;
    const upgrade = fixedIn ?? installed?.worker ?? SDK_PEER_SPANS[0]![0];
    return new UnsupportedSdkError(
      'a prebuilt workflowBundle',
      upgrade,
      `the Worker's workflowBundle was built by a Temporal bundler that lacks the fix for webpack >= 5.108: ${CONSEQUENCE}. Rebuild it with bundleWorkflowCode from @temporalio/worker ${upgrade} or newer, or set reuseV8Context: false on the Worker`,
    );
  }
  if (!installed || !fixedIn) return undefined;
  const webpack = parse(installed.webpack);
  if (webpack && !atLeast(webpack, CONST_CACHE_WEBPACK)) return undefined;
  return new UnsupportedSdkError(
    installed.worker,
    fixedIn,
    `@temporalio/worker ${installed.worker} bundles workflows with webpack ${installed.webpack}, and its bundler lacks the fix for webpack >= 5.108: ${CONSEQUENCE}. Upgrade @temporalio/activity, client, common, worker and workflow to ${fixedIn} or newer (the fix for your line), or set reuseV8Context: false on the Worker, or pin webpack to ~5.107.0`,
  );
}

/**
 * The versions of the `@temporalio/worker` this module imports and of the webpack it bundles
 * with, or undefined where they cannot be found (this library bundled into an app).
 */
function installedBundler(): { worker: string; webpack: string } | undefined {
  try {
    const require = createRequire(import.meta.url);
    const manifest = require.resolve('@temporalio/worker/package.json');
    const worker = (require(manifest) as { version: string }).version;
    const webpack = (createRequire(manifest)('webpack/package.json') as { version: string })
      .version;
    return { worker, webpack };
  } catch {
    return undefined;
  }
}
