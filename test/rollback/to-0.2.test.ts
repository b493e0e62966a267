import { DefaultLogger, Runtime } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { heldPatches, workflowPatches } from '../../src/protocol/patches.js';
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

/** The ids of the patches 0.2 does not know. */
const newerIds = new Set<string>(heldPatches('0.2').map((patch) => workflowPatches[patch].id));

let temporal: Temporal;
/** The scenarios as this version ran them with `compatibleWith: '0.2'`, and without it. */
let compatible: Recorded[];
let unrestricted: Recorded[];

beforeAll(async () => {
  temporal = await connectTemporal();
  compatible = await recordOn(temporal, 'compat-0.2', '0.2');
  unrestricted = await recordOn(temporal, 'new-0.2');
}, 240_000);

afterAll(async () => {
  await temporal?.native.close();
  await temporal?.connection.close();
});

describe("compatibleWith: '0.2' keeps a rollback to 0.2.0 replayable", () => {
  it('holds exactly the patches of later minors, and no run made with it took one', () => {
    for (const patch of heldPatches('0.2')) expect(workflowPatches[patch].since).not.toBe('0.2');
    for (const entry of compatible)
      expect(
        patchesIn(entry.history).filter((id) => newerIds.has(id)),
        entry.name,
      ).toEqual([]);
  });

  it("0.2.0's workflow code replays every run made with the option", async () => {
    expect(await replayFailures(await frozenCallers('0.2.0'), compatible)).toEqual({});
  }, 120_000);

  it("0.2.0's workflow code fails exactly the runs made without the option that took a newer patch", async () => {
    const previous = await frozenCallers('0.2.0');
    const tookNewer = unrestricted
      .filter((entry) => patchesIn(entry.history).some((id) => newerIds.has(id)))
      .map((entry) => entry.name);
    const failures = await replayFailures(previous, unrestricted);
    expect(Object.keys(failures).sort()).toEqual(tookNewer.sort());
    for (const failure of Object.values(failures)) expect(failure).toMatch(/[Nn]ondetermin/);
  }, 120_000);

  it('the current code replays both sets and the 0.2.0 histories, with the option and without', async () => {
    const held = await bundleCallers('0.2');
    expect(held.code).toContain('sideeffect-compatible-with:0.2');
    const everything = [...compatible, ...unrestricted, ...(await releasedHistories('0.2.0'))];
    expect(await replayFailures(await bundleCallers(), everything)).toEqual({});
    expect(await replayFailures(held, everything)).toEqual({});
  }, 180_000);
});
