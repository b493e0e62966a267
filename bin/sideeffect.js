#!/usr/bin/env node
// The `sideeffect` command. In a checkout it runs the TypeScript source through tsx (never a stale
// build); an installed package ships only dist/ and runs the compiled CLI.
import { existsSync } from 'node:fs';

const source = new URL('../src/cli/main.ts', import.meta.url);
let cli;
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  cli = await import(source.href);
} else {
  cli = await import(new URL('../dist/cli/main.js', import.meta.url).href);
}
process.exitCode = await cli.main(process.argv.slice(2));
