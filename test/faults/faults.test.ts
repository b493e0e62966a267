/**
 * The fault-injection harness (issue 7), one scenario per kind of fault: many small workflows of
 * guarded effects through workers SIGKILLed, paused past their lease, Postgres backends
 * terminated or cut off, the Temporal server restarted, responses lost; the checker judges each
 * run from the ledger and the store alone. Zero duplicates, zero stale writes landed, zero stuck
 * keys, every workflow finished. Long tier (`npm run test:long`): `npm test` runs every kind at
 * once in mixed.test.ts, and each kind's own effect in a faster test (crash.test.ts,
 * lease.test.ts, postgres-concurrency and postgres-dropped-connection, reconcile.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { faultSuite, injected, TTL_MS } from './suite.js';

const scenario = faultSuite();

describe('fault injection: no duplicate side effects', () => {
  it('workers SIGKILLed at random, mid-apply and right after the downstream write, then restarted', async () => {
    const report = await scenario({
      name: 'kill',
      faults: ['kill', 'kill-mid-apply', 'kill-after-write'],
      delayMs: [100, 400],
    });
    expect(injected(report, 'kill-mid-apply', 'kill-after-write')).toBeGreaterThan(0);
    // A worker that died holding `applying` leaves the key uncertain, never blindly re-applied.
    expect(report.uncertain).toBeGreaterThan(0);
  }, 180_000);

  it('a worker paused past its lease while another takes over: its late write is refused', async () => {
    const report = await scenario({
      name: 'pause',
      faults: ['pause'],
      // Long enough that the pause lands before the write, not after it.
      delayMs: [250, 500],
      // Well past the heartbeat timeout and the reconcile that follows the takeover.
      pauseMs: [2 * TTL_MS + 3_000, 2 * TTL_MS + 4_000],
    });
    expect(injected(report, 'pause')).toBeGreaterThan(0);
    expect(report.staleRejected).toBeGreaterThan(0);
  }, 180_000);

  it('Postgres backends terminated mid-operation and Postgres unreachable for seconds', async () => {
    const report = await scenario({ name: 'postgres', faults: ['pg-terminate', 'pg-cut'] });
    expect(injected(report, 'pg-terminate')).toBeGreaterThan(0);
    expect(injected(report, 'pg-cut')).toBeGreaterThan(0);
  }, 180_000);

  it('the Temporal server stopped and restarted while workflows run', async () => {
    const report = await scenario({
      name: 'temporal',
      faults: ['temporal-restart'],
      faultGapMs: [1_000, 2_000],
    });
    expect(injected(report, 'temporal-restart')).toBeGreaterThan(0);
  }, 180_000);

  it('the downstream takes the write but the response is lost', async () => {
    const report = await scenario({ name: 'lost', faults: [], loseResponse: 0.5 });
    expect(injected(report, 'lost-response')).toBeGreaterThan(0);
    expect(report.uncertain).toBeGreaterThan(0);
    expect(report.byProbe + report.bySignal).toBeGreaterThanOrEqual(report.uncertain);
  }, 180_000);
});
