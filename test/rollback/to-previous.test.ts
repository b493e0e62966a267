/**
 * `compatibleWith` for each minor after 0.1 (0.1 has its own file, previous-minor.test.ts, with
 * its legacy activity names): the recorded scenarios run with the option and without, then
 * replay on that release's workflow code, frozen in `./<release>/`. The patches a minor does not
 * know come from src/protocol/patches.ts, so the expectation follows each patch added later.
 */
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CompatibleWith,
  heldPatches,
  type WorkflowPatch,
  workflowPatches,
} from '../../src/protocol/patches.js';
import { bundleCallers } from '../histories/bundle.js';
import { patchesIn } from '../histories/markers.js';
import type { Recorded } from '../histories/scenarios.js';
import {
  connectTemporal,
  frozenCallers,
  recordOn,
  releasedHistories,
  replayFailures,
  type Temporal,
} from './harness.js';

Runtime.install({ logger: new DefaultLogger('WARN') });

/** Each minor a worker can hold to here, and the release whose workflow code is frozen for it. */
const previous = [
  { minor: '0.2', release: '0.2.0' },
  { minor: '0.3', release: '0.3.0' },
] as const satisfies ReadonlyArray<{ minor: CompatibleWith; release: string }>;

/** `a` is a later minor than `b`. */
function laterMinor(a: string, b: string): boolean {
  const [aMajor = 0, aMinor = 0] = a.split('.').map(Number);
  const [bMajor = 0, bMinor = 0] = b.split('.').map(Number);
  return aMajor > bMajor || (aMajor === bMajor && aMinor > bMinor);
}

let temporal: Temporal;
/** The scenarios as this version ran them with `compatibleWith` set to each minor. */
const compatible = new Map<CompatibleWith, Recorded[]>();
/** The scenarios as this version ran them without the option, shared by every minor's check. */
let unrestricted: Recorded[];

beforeAll(async () => {
  temporal = await connectTemporal();
  for (const { minor } of previous)
    compatible.set(minor, await recordOn(temporal, `compat-${minor}`, minor));
  unrestricted = await recordOn(temporal, 'new');
}, 600_000);

afterAll(async () => {
  await temporal?.native.close();
  await temporal?.connection.close();
});

describe.each(previous)(
  "compatibleWith: '$minor' keeps a rollback to $release replayable",
  ({ minor, release }) => {
    /** The ids of the patches this minor does not know (none yet for 0.3: see docs/versioning.md). */
    const newerIds = new Set<string>(heldPatches(minor).map((patch) => workflowPatches[patch].id));

    it('holds exactly the patches of later minors, and no run made with it took one', () => {
      expect(heldPatches(minor)).toEqual(
        (Object.keys(workflowPatches) as WorkflowPatch[]).filter((patch) =>
          laterMinor(workflowPatches[patch].since, minor),
        ),
      );
      for (const entry of compatible.get(minor)!)
        expect(
          patchesIn(entry.history).filter((id) => newerIds.has(id)),
          entry.name,
        ).toEqual([]);
    });

    it(`${release}'s workflow code replays every run made with the option`, async () => {
      expect(await replayFailures(await frozenCallers(release), compatible.get(minor)!)).toEqual(
        {},
      );
    }, 120_000);

    it(`${release}'s workflow code fails exactly the runs made without the option that took a newer patch`, async () => {
      const tookNewer = unrestricted
        .filter((entry) => patchesIn(entry.history).some((id) => newerIds.has(id)))
        .map((entry) => entry.name);
      const failures = await replayFailures(await frozenCallers(release), unrestricted);
      expect(Object.keys(failures).sort()).toEqual(tookNewer.sort());
      for (const failure of Object.values(failures)) expect(failure).toMatch(/[Nn]ondetermin/);
    }, 120_000);

    it(`the current code replays both sets and the ${release} histories, with the option and without`, async () => {
      const held = await bundleCallers(minor);
      expect(held.code).toContain(`sideeffect-compatible-with:${minor}`);
      const everything = [
        ...compatible.get(minor)!,
        ...unrestricted,
        ...(await releasedHistories(release)),
      ];
      expect(await replayFailures(await bundleCallers(), everything)).toEqual({});
      expect(await replayFailures(held, everything)).toEqual({});
    }, 180_000);
  },
);
