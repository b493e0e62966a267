/**
 * Test tiers: `npm test` runs each soak-shaped file at a size that proves the behaviour in
 * seconds; `npm run test:long` runs the same files at soak size (the long-* projects in
 * vitest.config.ts set SIDEEFFECT_TEST_TIER=long). One file per behaviour, so the quick run and
 * the soak cannot drift apart.
 */
export const LONG_TIER = process.env.SIDEEFFECT_TEST_TIER === 'long';

/** `quick` in `npm test`, `soak` in `npm run test:long`. */
export function sized<T>(quick: T, soak: T): T {
  return LONG_TIER ? soak : quick;
}
