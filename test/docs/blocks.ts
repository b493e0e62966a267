import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../support/temporal.js';

/** One fenced code block of a page; `file` when its first line names it (`// worker.ts`). */
export interface CodeBlock {
  lang: string;
  code: string;
  line: number;
  file?: string;
}

/** The README and every page of docs/, as paths relative to the repository. */
export function docPages(): string[] {
  const docs = readdirSync(path.join(REPO_ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`);
  return ['README.md', ...docs];
}

/** The fenced blocks of `page` in language `lang`, as written. */
export function codeBlocks(page: string, lang: string): CodeBlock[] {
  const lines = readFileSync(path.join(REPO_ROOT, page), 'utf8').split('\n');
  const blocks: CodeBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\w+)\s*$/.exec(lines[i]!);
    if (!open || open[2] !== lang) continue;
    const indent = open[1]!.length;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && lines[j]!.trim() !== '```'; j++) body.push(lines[j]!.slice(indent));
    const code = `${body.join('\n')}\n`;
    const named = /^\/\/ (?:file: )?([\w.-]+\.ts)\b/.exec(body[0] ?? '')?.[1];
    blocks.push({ lang, code, line: i + 1, ...(named ? { file: named } : {}) });
    i = j;
  }
  return blocks;
}
