import { MemoryStore } from '../../src/store/memory.js';
import { describeStoreConformance } from '../conformance/store-conformance.js';

describeStoreConformance('MemoryStore', async () => {
  let clock = 1_700_000_000_000;
  return {
    store: new MemoryStore({ now: () => clock }),
    advance: async (ms) => {
      clock += ms;
    },
    close: async () => {},
  };
});
