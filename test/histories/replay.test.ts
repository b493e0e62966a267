/**
 * Every released history replays against today's workflow code. A change that
 * alters the commands an old history expects fails here instead of failing
 * workflow tasks of runs that were waiting across a deploy.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { HISTORIES_DIR, releasedManifests } from './manifest.js';

const manifests = await releasedManifests();

describe('released workflow histories replay on the current code', () => {
  it('has the 0.1.0 histories checked in', () => {
    const released = manifests.find((manifest) => manifest.version === '0.1.0');
    expect(released?.histories.map((entry) => entry.workflowType).sort()).toEqual(
      expect.arrayContaining(['ReconcileWorkflow', 'guarded', 'guardedTwice']),
    );
  });

  for (const manifest of manifests) {
    it(`replays every ${manifest.version} history`, async () => {
      const workflowBundle = await bundleWorkflowCode({
        workflowsPath: path.join(HISTORIES_DIR, 'workflows.ts'),
        logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} },
      });
      const failures: string[] = [];
      for (const entry of manifest.histories) {
        const history: unknown = JSON.parse(
          await readFile(path.join(manifest.dir, entry.file), 'utf8'),
        );
        try {
          await Worker.runReplayHistory({ workflowBundle }, history, entry.workflowId);
        } catch (error) {
          failures.push(`${entry.file}: ${error instanceof Error ? error.message : String(error)}`);
        }
      }
      expect(failures).toEqual([]);
    }, 120_000);
  }
});
