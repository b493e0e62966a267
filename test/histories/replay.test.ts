/**
 * Every released history replays against today's workflow code. A change that
 * alters the commands an old history expects fails here instead of failing
 * workflow tasks of runs that were waiting across a deploy. Each release is
 * replayed on a plain bundle and on one built with each `compatibleWith`
 * value (a worker rolling back keeps what a run already took, so it must
 * replay every later release's runs too).
 */
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { beforeAll, describe, expect, it } from 'vitest';
import { heldFor, type WorkflowPatch, workflowPatches } from '../../src/protocol/patches.js';
import { bundleCallers } from './bundle.js';
import { releasedManifests } from './manifest.js';
import { patchesIn } from './markers.js';
import { patchesReached } from './scenarios.js';

const manifests = await releasedManifests();

/**
 * Patch ids the scenarios of 0.2.0 and 0.3.0 did not reach (the scenarios that do came later):
 * to close at 0.4.0, whose recording must hold each. Nothing else may be missing.
 */
const TO_CLOSE_AT_0_4_0: readonly string[] = [
  'sideeffect-reconcile-continue-as-new',
  'sideeffect-resolve-size-limit',
  'sideeffect-reconcile-late-search-attributes',
  'sideeffect-breaker-paused-wait',
  'sideeffect-pending-verdicts-shown',
];
const CLOSING_RELEASE = '0.4.0';
/** The releases recorded before the scenarios that reach {@link TO_CLOSE_AT_0_4_0}. */
const RECORDED_WITHOUT_THEM = ['0.2.0', '0.3.0'];

/** `<major>.<minor>` of a release. */
const minorOf = (version: string) => version.split('.').slice(0, 2).join('.');
/** Whether release `version` is of minor `since` or a later one. */
function atOrAfter(version: string, since: string): boolean {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  const [sinceMajor = 0, sinceMinor = 0] = since.split('.').map(Number);
  return major > sinceMajor || (major === sinceMajor && minor >= sinceMinor);
}
const bundles: Record<string, WorkflowBundleWithSourceMap> = {};

/** A release's histories, parsed, in manifest order. */
async function historiesOf(version: string): Promise<Array<{ file: string; history: unknown }>> {
  const manifest = manifests.find((entry) => entry.version === version)!;
  return Promise.all(
    manifest.histories.map(async ({ file }) => ({
      file,
      history: JSON.parse(await readFile(path.join(manifest.dir, file), 'utf8')) as unknown,
    })),
  );
}

beforeAll(async () => {
  bundles.plain = await bundleCallers();
  bundles["compatibleWith '0.1'"] = await bundleCallers('0.1');
  bundles["compatibleWith '0.2'"] = await bundleCallers('0.2');
  bundles["compatibleWith '0.3'"] = await bundleCallers('0.3');
}, 180_000);

describe('released workflow histories', () => {
  it('has the 0.1.0, 0.2.0, 0.3.0 and 0.4.0 histories checked in, every file listed in its manifest', async () => {
    expect(manifests.map((manifest) => manifest.version)).toEqual(
      expect.arrayContaining(['0.1.0', '0.2.0', '0.3.0', '0.4.0']),
    );
    for (const manifest of manifests) {
      expect(path.basename(manifest.dir)).toBe(manifest.version);
      const files = (await readdir(manifest.dir)).filter((name) => name !== 'manifest.json');
      expect(files.sort()).toEqual(manifest.histories.map((entry) => entry.file).sort());
      expect(new Set(manifest.histories.map((entry) => entry.workflowType))).toEqual(
        new Set([
          'ReconcileWorkflow',
          'guarded',
          'guardedTwice',
          ...(manifest.version === '0.1.0' ? [] : ['fanOut']),
        ]),
      );
    }
  });

  it("0.1.0's runs took no patch; each later release's took every patch of its own and earlier minors its scenarios reach", async () => {
    const taken = async (version: string) =>
      new Set((await historiesOf(version)).flatMap(({ history }) => patchesIn(history)));
    expect(await taken('0.1.0')).toEqual(new Set());
    // Recorded without compatibleWith: the release's branches, which later releases must keep
    // replaying. A scenario added later reaches patches of later releases only.
    for (const { version } of manifests.filter((entry) => entry.version !== '0.1.0')) {
      const release = minorOf(version);
      const missed = RECORDED_WITHOUT_THEM.includes(version) ? TO_CLOSE_AT_0_4_0 : [];
      const known = new Set<string>(
        (Object.keys(workflowPatches) as WorkflowPatch[])
          .filter((patch) => !heldFor(release, patch))
          .map((patch) => workflowPatches[patch].id),
      );
      expect(await taken(version), version).toEqual(
        new Set(patchesReached.filter((id) => known.has(id) && !missed.includes(id))),
      );
    }
  });

  it('holds every declared patch id in a history of its release or a later one (0.3 gaps named, to close at 0.4.0)', async () => {
    const closed = manifests.some((manifest) => manifest.version === CLOSING_RELEASE);
    const uncovered: string[] = [];
    for (const { id, since } of Object.values(workflowPatches)) {
      const releases = manifests.filter((manifest) => atOrAfter(manifest.version, since));
      let found = false;
      for (const { version } of releases)
        if ((await historiesOf(version)).some(({ history }) => patchesIn(history).includes(id)))
          found = true;
      if (found) continue;
      // Named gaps hold only until the release that closes them is recorded.
      if (TO_CLOSE_AT_0_4_0.includes(id) && !closed) continue;
      // A patch of a release not recorded yet: its recording will hold it if a scenario reaches it.
      if (releases.length === 0 && patchesReached.includes(id)) continue;
      uncovered.push(`${id} (since ${since})`);
    }
    expect(uncovered).toEqual([]);
    // Every gap is reached by a scenario, so recording 0.4.0 closes it.
    for (const id of TO_CLOSE_AT_0_4_0) expect(patchesReached, id).toContain(id);
  });

  for (const manifest of manifests) {
    for (const bundle of [
      'plain',
      "compatibleWith '0.1'",
      "compatibleWith '0.2'",
      "compatibleWith '0.3'",
    ]) {
      it(`replays every ${manifest.version} history on the current code (${bundle} bundle)`, async () => {
        const histories = await historiesOf(manifest.version);
        const failures: string[] = [];
        for (const [index, { file, history }] of histories.entries()) {
          const { workflowId } = manifest.histories[index]!;
          try {
            await Worker.runReplayHistory(
              { workflowBundle: bundles[bundle]! },
              history,
              workflowId,
            );
          } catch (error) {
            failures.push(`${file}: ${error instanceof Error ? error.message : String(error)}`);
          }
        }
        expect(failures).toEqual([]);
      }, 120_000);
    }
  }
});
