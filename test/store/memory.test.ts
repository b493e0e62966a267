import { MemoryStore } from '../../src/store/memory.js';
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
