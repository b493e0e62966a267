/**
 * The library's workflow patches and the release that introduced each, so a worker can hold back
 * every patch a previous minor version does not know (`SideEffectPlugin`'s `compatibleWith`):
 * runs it executes then emit exactly the commands that version emits, and a rollback to it
 * replays them. Workflow-safe (no imports): read by the workflows and by the worker side.
 *
 * A new patch is one entry here, with the minor version it ships in; `patched()` is called only
 * through `takePatch(name)` (src/workflows/patch.ts).
 */

/** A minor version, `<major>.<minor>`. */
type Minor = `${number}.${number}`;

/**
 * Every patch of the library's workflows, by the name the code asks for it with: its id, the one
 * place it is written (recorded in the histories of runs that took it, so never changed, nor
 * reused), and the minor version that introduced it. The first id has a `.` after the prefix,
 * every later one a `-`: new ids take `sideeffect-<what>`, and the name is the id without its
 * prefix, in camelCase.
 */
export const workflowPatches = {
  /**
   * Runs that schedule the library's activities under their `sideeffect.*` names; a run that
   * started without it keeps the 0.1.0 names on replay.
   */
  namespacedActivities: { id: 'sideeffect.namespaced-activities', since: '0.2' },
  /** ReconcileWorkflow runs that may continue as new; histories recorded before it never do, so they replay unchanged. */
  reconcileContinueAsNew: { id: 'sideeffect-reconcile-continue-as-new', since: '0.2' },
  /** ReconcileWorkflow runs that refuse an oversized `resolve` signal in the workflow instead of sending it to the store. */
  resolveSizeLimit: { id: 'sideeffect-resolve-size-limit', since: '0.2' },
  /** Callers that recheck with backoff and without re-subscribing; histories recorded before it replay the old loop. */
  recheckBackoff: { id: 'sideeffect-recheck-backoff', since: '0.2' },
  /**
   * Callers that treat a `reconciled` signal as a prompt to read the key from the store (an
   * activity) instead of returning its payload, so a forged signal cannot complete a call the
   * store still holds uncertain. Histories recorded before it return the signalled verdict on
   * replay.
   */
  reconciledReadsStore: { id: 'sideeffect-reconciled-reads-store', since: '0.2' },
  /**
   * ReconcileWorkflow runs that read their key from the store on every reminder and on a
   * `recheck` signal, and end once it is resolved there: a verdict recorded by any path (the
   * CLI's store-only fallback, a direct `resolveUncertain`) no longer leaves them waiting forever.
   * Histories recorded before it replay their reminders as plain log lines.
   */
  reconcileRecheckStore: { id: 'sideeffect-reconcile-recheck-store', since: '0.2' },
  /**
   * ReconcileWorkflow runs that tell the store activity, with each verdict, the effect (whose
   * declared `result` check the worker runs before the store is touched) and the signal or Update
   * that delivered it (whose sender's Temporal identity is recorded beside `by`). Activity
   * arguments are no command, so every run now passes them, held by `compatibleWith` or not; the
   * patch is still asked where runs that took it recorded its marker.
   */
  verdictContext: { id: 'sideeffect-verdict-context', since: '0.2' },
  /**
   * Callers whose effect activities wait for a cancelled apply to stop: the workflow then learns
   * how the apply really ended (done, or uncertain) instead of moving on while it still runs.
   * Histories recorded before it (TRY_CANCEL) replay unchanged.
   */
  effectWaitCancellation: { id: 'sideeffect-effect-wait-cancellation', since: '0.2' },
  /**
   * ReconcileWorkflow runs that, lacking some of the search attributes (started memo-only,
   * before they were registered), ask the worker which are registered by now at each reminder,
   * `recheck` signal and continue-as-new, and upsert those: a batch over the waiting query then
   * finds reconciles opened before registration. Histories recorded before it never ask.
   */
  reconcileLateSearchAttributes: {
    id: 'sideeffect-reconcile-late-search-attributes',
    since: '0.2',
  },
  /**
   * ReconcileWorkflow runs that take a `resolve` signal naming the attempt it judges (`fence`).
   * 0.1.0 refused the field as unknown, recording nothing, so a run held to its commands refuses
   * it the same way (a rollback then replays it), and so does the replay of a 0.1.0 history that
   * received one. The Update takes `fence` in every run: a rejected Update leaves no event, and
   * an accepted one is replayed without its validator.
   */
  resolveSignalFence: { id: 'sideeffect-resolve-signal-fence', since: '0.2' },
  /**
   * ReconcileWorkflow runs that read the store naming their effect, so the verdicts held there
   * for a worker's check (recorded by the CLI when no worker answered in time) are judged with
   * that effect's result check, and list the pending verdicts refused among their refused verdicts.
   * Histories recorded before it read the store with the key alone (the worker then judges with
   * the effect in the run's memo, if any).
   */
  heldVerdicts: { id: 'sideeffect-held-verdicts', since: '0.2' },
  /**
   * Callers whose effect activity gave up on `SideEffectPaused` (its group's breaker open, and the
   * activity's own retry policy ran out of attempts): they sleep until the next half-open and call
   * again, with a fresh attempt budget, instead of failing. Asked only when that happens, so
   * histories recorded before it (none of which met a breaker) replay unchanged.
   */
  breakerPausedWait: { id: 'sideeffect-breaker-paused-wait', since: '0.3' },
  /**
   * ReconcileWorkflow runs that show the verdicts still pending in the store on their attempt
   * (as a store read found them) in the `status` query and their details, so whoever decides sees
   * them first. Taken only once a read finds one; no command follows from it (a query answer and
   * the details are no commands), the marker only records where runs began to show them.
   */
  pendingVerdictsShown: { id: 'sideeffect-pending-verdicts-shown', since: '0.3' },
  /**
   * ReconcileWorkflow runs that refuse a `resolve` signal or Update naming no attempt (no
   * `fence`): the page a person opens shows the key's latest run, so a fence-less verdict about
   * an earlier attempt decided the latest one, which nobody checked (a second charge). Such runs
   * take `"attempt": "any"` as the explicit way to decide whatever this run judges, and refuse
   * the template's `result` placeholder. Asked only when a verdict names no fence (or carries
   * that placeholder), so histories recorded before it, and runs held to 0.1, keep taking a
   * fence-less verdict for the run's own attempt and refusing `attempt` as an unknown field.
   */
  verdictNamesAttempt: { id: 'sideeffect-verdict-names-attempt', since: '0.3' },
} as const satisfies Record<string, { id: string; since: Minor }>;

/** The name of one of the library's workflow patches (its id is {@link workflowPatches}`[name].id`). */
export type WorkflowPatch = keyof typeof workflowPatches;

/**
 * The earlier minor versions whose workers can replay what a worker set `compatibleWith` to one
 * of them executes. Only released minors that recorded their histories: each is tested by
 * replaying such runs with that release's workflow code.
 */
export const compatibleVersions = ['0.1', '0.2'] as const;

/** A previous minor version a worker can keep its runs replayable by (`compatibleWith`). */
export type CompatibleWith = (typeof compatibleVersions)[number];

/** Whether `value` is a version `compatibleWith` accepts. */
export function isCompatibleWith(value: unknown): value is CompatibleWith {
  return (compatibleVersions as readonly unknown[]).includes(value);
}

/** Whether a worker compatible with `version` holds the patch: it came in a later minor. */
export function heldFor(version: string, patch: WorkflowPatch): boolean {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  const [since, sinceMinor = 0] = workflowPatches[patch].since.split('.').map(Number) as [
    number,
    number,
  ];
  return since > major || (since === major && sinceMinor > minor);
}

/** The patches a worker compatible with `version` holds. */
export function heldPatches(version: CompatibleWith): WorkflowPatch[] {
  return (Object.keys(workflowPatches) as WorkflowPatch[]).filter((patch) =>
    heldFor(version, patch),
  );
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
