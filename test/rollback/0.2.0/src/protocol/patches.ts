/**
 * The library's workflow patches and the release that introduced each, so a worker can hold back
 * every patch a previous minor version does not know (`SideEffectPlugin`'s `compatibleWith`):
 * runs it executes then emit exactly the commands that version emits, and a rollback to it
 * replays them. Workflow-safe (no imports): read by the workflows and by the worker side.
 *
 * A new patch is one line here, with the minor version it ships in; `patched()` is called only
 * through `takePatch()` (src/workflows/patch.ts).
 */

/** A minor version, `<major>.<minor>`. */
type Minor = `${number}.${number}`;

/** Every patch id the library's workflows ask for, with the minor version that introduced it. */
export const workflowPatches = {
  'sideeffect.namespaced-activities': '0.2',
  'sideeffect-reconcile-continue-as-new': '0.2',
  'sideeffect-resolve-size-limit': '0.2',
  'sideeffect-recheck-backoff': '0.2',
  'sideeffect-reconciled-reads-store': '0.2',
  'sideeffect-reconcile-recheck-store': '0.2',
  'sideeffect-verdict-context': '0.2',
  'sideeffect-effect-wait-cancellation': '0.2',
  'sideeffect-reconcile-late-search-attributes': '0.2',
  'sideeffect-resolve-signal-fence': '0.2',
  'sideeffect-held-verdicts': '0.2',
} as const satisfies Record<string, Minor>;

/** The id of one of the library's workflow patches. */
export type WorkflowPatchId = keyof typeof workflowPatches;

/**
 * The earlier minor versions whose workers can replay what a worker set `compatibleWith` to one
 * of them executes. Only released minors that recorded their histories: each is tested by
 * replaying such runs with that release's workflow code.
 */
export const compatibleVersions = ['0.1'] as const;

/** A previous minor version a worker can keep its runs replayable by (`compatibleWith`). */
export type CompatibleWith = (typeof compatibleVersions)[number];

/** Whether `value` is a version `compatibleWith` accepts. */
export function isCompatibleWith(value: unknown): value is CompatibleWith {
  return (compatibleVersions as readonly unknown[]).includes(value);
}

/** Whether a worker compatible with `version` holds the patch: it came in a later minor. */
export function heldFor(version: string, id: WorkflowPatchId): boolean {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  const [since, sinceMinor = 0] = workflowPatches[id].split('.').map(Number) as [number, number];
  return since > major || (since === major && sinceMinor > minor);
}

/** The patches a worker compatible with `version` holds. */
export function heldPatches(version: CompatibleWith): WorkflowPatchId[] {
  return (Object.keys(workflowPatches) as WorkflowPatchId[]).filter((id) => heldFor(version, id));
}

/**
 * The global the bundler replaces with the worker's setting (webpack's DefinePlugin), so the
 * workflow code of the user's bundle, where effect calls run, reads the plugin's option.
 */
export const COMPATIBLE_WITH_GLOBAL = '__SIDEEFFECT_COMPATIBLE_WITH__';

/** Prefixes the defined value, so a prebuilt bundle's setting can be read from its code. */
export const COMPATIBLE_WITH_MARK = 'sideeffect-compatible-with:';

/** The setting as the bundler writes it into the code. */
export const compatibleWithValue = (version: CompatibleWith): string =>
  `${COMPATIBLE_WITH_MARK}${version}`;

/**
 * The setting a bundle was built with, read from its code: the version, or undefined when none
 * was defined. Only a defined value puts digits after the mark; the library's own reading code
 * holds the mark alone.
 */
export function bundledCompatibleWith(code: string): string | undefined {
  const found = new RegExp(`${COMPATIBLE_WITH_MARK}(\\d+\\.\\d+)`).exec(code);
  return found?.[1];
}
