import { describe, expect, it } from 'vitest';
import { MemoryStore } from '../../src/store/memory.js';
import { describeBreakerConformance } from '../conformance/breaker-conformance.js';
import { describeStoreConformance, type StoreFactory } from '../conformance/store-conformance.js';
import { describeStoreProperties } from '../conformance/store-properties.js';

/** A MemoryStore on an injected clock that only `advance` moves. */
const memoryStore: StoreFactory = async () => {
  let clock = 1_700_000_000_000;
  return {
    store: new MemoryStore({ now: () => clock }),
    advance: async (ms) => {
      clock += ms;
    },
    close: async () => {},
  };
};

describeStoreConformance('MemoryStore', memoryStore);
describeStoreProperties('MemoryStore', memoryStore, 1_000);
describeBreakerConformance('MemoryStore', async () => {
  const { store, advance, close } = await memoryStore();
  return { store: store as MemoryStore, advance, close };
});

describe('MemoryStore limits', () => {
  it('maxTtlMs is configurable: a longer lease is refused with a typed error, nothing written', async () => {
    const store = new MemoryStore({ limits: { maxTtlMs: 60_000 } });
    const action = { key: 'k', resource: 'r' };
    await expect(store.acquire(action, 60_001)).rejects.toMatchObject({
      code: 'INVALID_ACTION',
      field: 'ttlMs',
    });
    expect(await store.inspect('k')).toBeUndefined();
    expect((await store.acquire(action, 60_000)).outcome).toBe('granted');
  });
});
