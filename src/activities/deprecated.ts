/**
 * The `sideeffect/activities` entry point's names on their way out, each an alias of its
 * replacement until the release its tag names. Kept apart so nothing of the library imports them.
 */
import * as core from '../core/errors.js';

/** @deprecated since 0.3.0, removed in 0.4.0: import `NotAppliedError` from `sideeffect`, its one home; the same class. */
export const NotAppliedError = core.NotAppliedError;
/** @deprecated since 0.3.0, removed in 0.4.0: import `NotAppliedError` from `sideeffect`. */
export type NotAppliedError = core.NotAppliedError;
