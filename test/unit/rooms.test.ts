/**
 * No source file over 600 lines: a file that grows past it holds more than one job, and is split
 * by job (as src/store/postgres/ is) before it becomes the file every change conflicts in.
 * Generated files are data, not rooms.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));

it('every hand-written source file has at most 600 lines', () => {
  const long = (readdirSync(SRC, { recursive: true }) as string[])
    .filter((file) => file.endsWith('.ts') && !file.endsWith('.generated.ts'))
    .map((file) => [file, readFileSync(join(SRC, file), 'utf8').split('\n').length - 1] as const)
    .filter(([, lines]) => lines > 600);
  expect(long).toEqual([]);
});
