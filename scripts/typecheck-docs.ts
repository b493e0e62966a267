/**
 * `npm run typecheck` (after `tsc --noEmit`): every TypeScript block of the README and docs/,
 * written out one file a block and type-checked against the library's source, as a user's app
 * imports it (`sideeffect`, `sideeffect/postgres`, ...). A block that no longer compiles fails
 * the command with tsc's error, naming the page and the block's line. It ran as a unit test
 * before, where this one tsc took 97 of the tier's 108 s.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { codeBlocks, docPages } from '../test/docs/blocks.js';
import { REPO_ROOT } from '../test/support/temporal.js';

const out = path.join(REPO_ROOT, 'test-output/docs-typecheck');
rmSync(out, { recursive: true, force: true });
const files: string[] = [];
for (const page of docPages()) {
  const dir = path.join(out, page.replace(/\W+/g, '_'));
  mkdirSync(dir, { recursive: true });
  for (const block of codeBlocks(page, 'ts')) {
    const file = path.join(dir, block.file ?? `block-${block.line}.ts`);
    writeFileSync(file, block.code);
    files.push(path.relative(out, file));
  }
}
// Fewer means the blocks were not found (a changed fence), and nothing would be checked.
if (files.length <= 5) {
  console.error(`typecheck-docs: only ${files.length} TypeScript blocks found in the docs`);
  process.exit(1);
}
const src = (entry: string) => [path.join(REPO_ROOT, 'src', entry)];
writeFileSync(
  path.join(out, 'tsconfig.json'),
  JSON.stringify({
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      lib: ['ES2023', 'ES2024.String'],
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: ['node'],
      typeRoots: [path.join(REPO_ROOT, 'node_modules/@types')],
      paths: {
        sideeffect: src('index.ts'),
        'sideeffect/postgres': src('store/postgres/index.ts'),
        'sideeffect/*': src('*/index.ts'),
      },
    },
    files,
  }),
);
const tsc = path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc');
try {
  await promisify(execFile)(process.execPath, [tsc, '-p', out]);
  console.log(`typecheck-docs: ${files.length} blocks of the README and docs/ type-check`);
} catch (error) {
  const failed = error as { stdout?: string; stderr?: string; message: string };
  console.error(failed.stdout || failed.stderr || failed.message);
  console.error(
    `typecheck-docs: blocks that do not compile are in ${path.relative(REPO_ROOT, out)}`,
  );
  process.exit(1);
}
