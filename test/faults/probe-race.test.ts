/**
 * Why the harness's probe and operator fence the downstream before they read it (effects.ts
 * `readLedger`): a holder that lost its lease may be paused, not dead. Raising the sink's mark
 * past the key's last fence in the same transaction as the read makes "not applied" stay true.
 * (With a plain read the same steps apply the key twice: `npx tsx test/faults/probe-race.ts`.)
 */
import { describe, expect, it } from 'vitest';
import { type BatchingMode, batchingOption } from '../support/batching.js';
import { probeRace } from './probe-race.js';

describe.each(['every call', 'off'] as const satisfies BatchingMode[])(
  'batching %s',
  (batching) => {
    it('resolving an uncertain key while its old holder is paused: a fenced read refuses the old holder’s late write, the re-run applies it once', async () => {
      const race = await probeRace(true, batchingOption(batching));
      expect(race.steps).toEqual([
        "B's retry: uncertain",
        'probe (fenced read): applied=false',
        "A's late write with fence 1: refused",
        "B's re-run with fence 2: written, completed",
      ]);
      expect(race.ledger).toEqual([{ seq: 1, fence: 2, writer: 2 }]);
    });
  },
);
