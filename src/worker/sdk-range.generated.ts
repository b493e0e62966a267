// Generated from package.json's peerDependencies by `npm run sdk-range:generate`: do not edit.
// package.json is the source of truth; a unit test fails while this module is stale.

/** The `@temporalio/worker` peer range: >=1.15.1 <1.16.0 || >=1.16.3 <1.17.0 || >=1.17.5 <1.18.0 || >=1.18.2 <1.19.0 || >=1.20.1 <1.25.0 */
export const SDK_PEER_SPANS: ReadonlyArray<readonly [from: string, below: string]> = [
  ['1.15.1', '1.16.0'],
  ['1.16.3', '1.17.0'],
  ['1.17.5', '1.18.0'],
  ['1.18.2', '1.19.0'],
  ['1.20.1', '1.25.0'],
];
