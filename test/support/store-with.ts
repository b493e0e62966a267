import type { Store } from '../../src/core/index.js';

/** The store with some operations replaced, to inject a failure at one exact step (unit tests of pure Runner logic only). */
export function storeWith(store: Store, overrides: Partial<Store>): Store {
  return new Proxy(store, {
    get(target, property, receiver) {
      if (property in overrides) return overrides[property as keyof Store];
      const value = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
