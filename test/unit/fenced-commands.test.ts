/**
 * Every `sideeffect resolve` a person is shown to copy names the attempt it judges: what `show`
 * prints, what the demo prints (and the UI test pastes), and every command in the README and the
 * docs. A command without it, copied while a later attempt is uncertain, decides that attempt
 * with what was checked about an earlier one (issue 30: a second charge).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveInstructions } from '../../examples/instructions.js';
import { printKey } from '../../src/cli/format.js';
import { REPO_ROOT } from '../support/temporal.js';

/** The arguments of each `sideeffect resolve` command in `text` (up to a backtick or line end). */
function resolveCommands(text: string): string[] {
  return [...text.matchAll(/sideeffect(?: --)? resolve\b([^`\n]*)/g)].map((m) => m[1]!.trim());
}

/** A command names its attempt, or decides many with a stated rule, or only asks for help. */
function namesAttempt(args: string): boolean {
  return /--fence \S+|--any-attempt|--from-file|--help/.test(args);
}

describe('copyable resolve commands name the attempt', () => {
  it('sideeffect show: the next steps carry the uncertain attempt', () => {
    const shown = printKey(
      {
        key: "order-7/it's",
        resource: 'card:1',
        state: 'uncertain',
        fence: 12,
        retrySafety: 'unknown',
        updatedAt: 0,
        reason: 'gateway timeout',
      },
      [],
    );
    const commands = resolveCommands(shown);
    expect(commands).toHaveLength(2);
    for (const args of commands) {
      expect(args).toContain('--fence 12');
      expect(args.startsWith(`'order-7/it'\\''s'`)).toBe(true);
    }
  });

  it('the demo: the CLI line, the signal to paste and the per-key signal carry the fence', () => {
    const { text, pasteable } = resolveInstructions({
      uiUrl: 'http://localhost:8233',
      namespace: 'default',
      key: 'demo-1-order-D/charge',
      resource: 'card:1',
      verdict: { applied: true, result: { chargeId: 'ch_1' }, reason: 'in the ledger', fence: 5 },
      downstream: 'the bank',
    });
    expect(JSON.parse(pasteable)).toMatchObject({ fence: 5 });
    const commands = resolveCommands(text);
    expect(commands.length).toBeGreaterThanOrEqual(3);
    for (const args of commands) expect(namesAttempt(args), args).toBe(true);
    expect(text).toContain("resolve 'demo-1-order-D/charge' --fence 5 --applied");
    expect(text).toMatch(/"fence":5/);
  });

  it('README and docs: every resolve command names its attempt', () => {
    const files = [
      path.join(REPO_ROOT, 'README.md'),
      ...readdirSync(path.join(REPO_ROOT, 'docs'))
        .filter((name) => name.endsWith('.md'))
        .map((name) => path.join(REPO_ROOT, 'docs', name)),
    ];
    const unfenced = files.flatMap((file) =>
      resolveCommands(readFileSync(file, 'utf8'))
        // Prose naming the command itself ("`sideeffect resolve` exits 1") copies nothing.
        .filter((args) => args !== '' && !namesAttempt(args))
        .map((args) => `${path.basename(file)}: sideeffect resolve ${args}`),
    );
    expect(unfenced).toEqual([]);
  });
});
