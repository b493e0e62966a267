import { patched, workflowInfo } from '@temporalio/workflow';
import {
  COMPATIBLE_WITH_MARK,
  heldFor,
  type WorkflowPatch,
  workflowPatches,
} from '../protocol/patches.js';

/** Replaced by the bundler with the worker's `compatibleWith` setting; undeclared without one. */
declare const __SIDEEFFECT_COMPATIBLE_WITH__: string | undefined;

/** The previous minor version this bundle's runs stay replayable by, or undefined. */
const compatibleWith: string | undefined = (() => {
  const value =
    typeof __SIDEEFFECT_COMPATIBLE_WITH__ === 'string' ? __SIDEEFFECT_COMPATIBLE_WITH__ : undefined;
  return value?.startsWith(COMPATIBLE_WITH_MARK)
    ? value.slice(COMPATIBLE_WITH_MARK.length)
    : undefined;
})();

/**
 * Whether this bundle holds `id` (its `compatibleWith` names a version that does not know it), so
 * what a person is offered (the UI's verdict template, which is no command) matches what the run
 * will accept.
 */
export function holds(patch: WorkflowPatch): boolean {
  return compatibleWith !== undefined && heldFor(compatibleWith, patch) && !taken.has(patch);
}

/** Patches this run has taken: asked again, they stay taken whatever the worker's setting. */
const taken = new Set<WorkflowPatch>();

/**
 * `patched()` with the patch's registered id, except that a worker set to stay compatible with an earlier minor version
 * (`compatibleWith`) does not take a patch that version does not know: the run keeps the old
 * branch and records no marker, so a worker of that version can replay it after a rollback.
 *
 * Held only where the decision is new (live execution, a patch this run never took). While
 * replaying, the history decides as `patched()` always does: a run that took the patch under
 * another setting keeps it, so turning the setting on or off never breaks a replay on this code.
 * Every `patched()` call of the library's workflows goes through here.
 *
 * `evenIfHeld` takes it live whatever the setting: only for a protection 0.1.0's commands cannot
 * express at all, where keeping it costs that one run its replay by the older version.
 */
export function takePatch(patch: WorkflowPatch, options: { evenIfHeld?: boolean } = {}): boolean {
  const held =
    !options.evenIfHeld && compatibleWith !== undefined && heldFor(compatibleWith, patch);
  if (held && !taken.has(patch) && !workflowInfo().unsafe.isReplaying) return false;
  const on = patched(workflowPatches[patch].id);
  if (on) taken.add(patch);
  return on;
}
