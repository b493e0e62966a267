/**
 * Renders package.json's SDK peer range into src/worker/sdk-range.generated.ts, so the worker's
 * SDK check reads the range from the one place it is written, also from a bundle (which has no
 * package.json beside it). `npm run sdk-range:generate` writes it; a unit test fails while the
 * committed module differs from what this renders.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const SDK_RANGE_MODULE = 'src/worker/sdk-range.generated.ts';

/** One `>=X.Y.Z <X.Y.Z` set of the range, the only form the range is written in. */
const SPAN = /^>=(\d+\.\d+\.\d+) <(\d+\.\d+\.\d+)$/;

export function renderSdkRangeModule(root: string): string {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    peerDependencies: Record<string, string>;
  };
  const range = manifest.peerDependencies['@temporalio/worker'];
  if (range === undefined) throw new Error('package.json has no @temporalio/worker peer range');
  const spans = range.split('||').map((set) => {
    const match = SPAN.exec(set.trim());
    if (!match)
      throw new Error(`write each set of the SDK peer range as >=X.Y.Z <X.Y.Z, not ${set}`);
    return `  ['${match[1]}', '${match[2]}'],\n`;
  });
  return (
    `// Generated from package.json's peerDependencies by \`npm run sdk-range:generate\`: do not edit.\n` +
    `// package.json is the source of truth; a unit test fails while this module is stale.\n\n` +
    `/** The \`@temporalio/worker\` peer range: ${range.replaceAll('*/', '*\\/')} */\n` +
    `export const SDK_PEER_SPANS: ReadonlyArray<readonly [from: string, below: string]> = [\n` +
    spans.join('') +
    `];\n`
  );
}
