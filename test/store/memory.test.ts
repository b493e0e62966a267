import { MemoryStore } from '../../src/store/memory.js';
import { describeStoreConformance } from '../conformance/store-conformance.js';
import { describeStoreProperties } from '../conformance/store-properties.js';

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

describeStoreProperties(
  'MemoryStore',
  async () => {
    let clock = 1_700_000_000_000;
    return {
      store: new MemoryStore({ now: () => clock }),
      advance: async (ms) => {
        clock += ms;
      },
      close: async () => {},
    };
  },
  1_000,
);
