/**
 * Every kind of fault at once on the fault-injection harness (see suite.ts): workers SIGKILLed
 * (at random, mid-apply, right after the downstream write), paused past their lease, Postgres
 * backends terminated and cut off, the Temporal server restarted, responses lost. The checker
 * judges the run from the ledger and the store alone. `npm test` runs it small; `npm run
 * test:long` at soak size, beside faults.test.ts (one scenario per kind); `npm run soak --
 * --minutes N` for as long as asked.
 */
import { describe, expect, it } from 'vitest';
import { sized } from '../support/tier.js';
import { FAULT_KINDS } from './scenario.js';
import { faultSuite } from './suite.js';

const scenario = faultSuite();

describe('fault injection: no duplicate side effects', () => {
  it('every fault at once', async () => {
    const report = await scenario({
      name: 'mixed',
      faults: FAULT_KINDS,
      workflows: sized(18, 30),
      resources: 4,
      maxFaults: sized(FAULT_KINDS.length, 10),
      loseResponse: 0.1,
    });
    expect(Object.keys(report.faults).length).toBeGreaterThan(2);
  }, 240_000);
});
