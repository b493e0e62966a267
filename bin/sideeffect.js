#!/usr/bin/env node
// The `sideeffect` command: the compiled CLI when built, else the TypeScript source through tsx.
import { existsSync } from 'node:fs';

const built = new URL('../dist/cli/main.js', import.meta.url);
let cli;
if (existsSync(built)) {
  cli = await import(built.href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  cli = await import(new URL('../src/cli/main.ts', import.meta.url).href);
}
process.exitCode = await cli.main(process.argv.slice(2));
