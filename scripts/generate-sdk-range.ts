/** `npm run sdk-range:generate`: rewrites the SDK peer range module from package.json. */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { renderSdkRangeModule, SDK_RANGE_MODULE } from './sdk-range-module.js';

const root = fileURLToPath(new URL('..', import.meta.url));
writeFileSync(new URL(`../${SDK_RANGE_MODULE}`, import.meta.url), renderSdkRangeModule(root));
console.log(`wrote ${SDK_RANGE_MODULE}`);
