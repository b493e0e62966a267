/**
 * How the stores of a test group their calls (PgStoreOptions.batching), so the store suites run
 * both ways:
 *
 * - `on`: the default. Concurrent calls of one kind share a statement; a call alone (every call
 *   of a test that awaits each one) takes the one-key statement.
 * - `off`: one statement per call.
 * - `every call`: on, and every call goes through the shared statement even alone, so a
 *   sequential suite (the conformance suite) holds the batch statements to the whole contract.
 *
 * Suites whose subject is the statements take their modes from `describe.each`; every other
 * store a test makes uses SIDEEFFECT_TEST_BATCHING (on, off or every-call; default on), so
 * `SIDEEFFECT_TEST_BATCHING=off npx vitest run test/store` runs the lot one key at a time.
 */
import { batchEveryCall } from '../../src/store/postgres/batcher.js';
import type { PgStoreOptions } from '../../src/store/postgres/index.js';

export type BatchingMode = 'on' | 'off' | 'every call';

/** The mode SIDEEFFECT_TEST_BATCHING asks for. */
export function envBatching(): BatchingMode {
  const value = process.env.SIDEEFFECT_TEST_BATCHING;
  if (value === undefined || value === '' || value === 'on') return 'on';
  if (value === 'off') return 'off';
  if (value === 'every-call') return 'every call';
  throw new Error(`SIDEEFFECT_TEST_BATCHING must be on, off or every-call, got ${value}`);
}

/** The store option for a mode. */
export function batchingOption(mode: BatchingMode = envBatching()): PgStoreOptions['batching'] {
  switch (mode) {
    case 'on':
      return true;
    case 'off':
      return false;
    case 'every call': {
      const option: { maxKeys: number; [batchEveryCall]: boolean } = {
        maxKeys: 32,
        [batchEveryCall]: true,
      };
      return option;
    }
  }
}
