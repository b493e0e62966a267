import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, describe, expect, it } from 'vitest';
import { reconcileWorkflowId, resolveSignal } from '../../src/workflows/index.js';
import { REPO_ROOT, TEMPORAL_ADDRESS, TEMPORAL_UI_URL } from '../support/temporal.js';

/** The quick start block of docs/development.md: the commands a contributor types, in order. */
function quickStart(): string[] {
  const readme = readFileSync(path.join(REPO_ROOT, 'docs/development.md'), 'utf8');
  const block = readme
    .split(/^## /m)
    .find((s) => s.startsWith('Quick start'))
    ?.match(/```sh\n([\s\S]*?)```/)?.[1];
  if (!block) throw new Error('docs/development.md has no sh block under "## Quick start"');
  return block
    .split('\n')
    .map((line) => line.replace(/#.*$/, '').trim())
    .filter(Boolean);
}

let scratch: string | undefined;
let demo: ChildProcess | undefined;

afterAll(() => {
  demo?.kill('SIGKILL');
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe('the development quick start in a scratch clone', () => {
  it('two commands: the demo reaches the waiting reconcile step and exits 0 once resolved', async () => {
    const commands = quickStart();
    expect(commands).toHaveLength(2);
    expect(commands[1]).toBe('npm test');

    scratch = mkdtempSync(path.join(tmpdir(), 'sideeffect-quickstart-'));
    const clone = path.join(scratch, 'sideeffect');
    execFileSync('git', ['clone', '--quiet', REPO_ROOT, clone]);

    let output = '';
    demo = spawn('bash', ['-c', commands[0]!], {
      cwd: clone,
      stdio: ['ignore', 'pipe', 'pipe'],
      // The demo reads Temporal's standard variables; the tests' server, whatever the shell says.
      env: { ...process.env, TEMPORAL_ADDRESS, TEMPORAL_UI_URL },
    });
    demo.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    demo.stderr!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => demo!.on('exit', resolve));

    const waiting = await Promise.race([
      until(() => /Waiting for the resolve signal/.test(output)),
      exited.then((code) => {
        throw new Error(`the demo exited (${code}) before waiting:\n${output}`);
      }),
    ]);
    expect(waiting).toBe(true);
    for (const outcome of ['applied', 'replayed', 'contended', 'uncertain']) {
      expect(output).toMatch(new RegExp(`^\\[\\d/4\\] ${outcome}`, 'm'));
    }
    const ui = TEMPORAL_UI_URL.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
    expect(output).toMatch(new RegExp(`${ui}/namespaces/default/workflows/reconcile%2F`));
    const key = output.match(/resolve '([^']+)'/)?.[1];
    expect(key).toMatch(/^demo-[0-9a-f]+-order-D\/charge$/);
    const signal = output.match(/--name resolve --input '(.+)'$/m)?.[1];
    expect(signal).toBeDefined();
    // The verdict to paste is laid out as the UI's signal form lays it out (one Submit click sends)...
    expect(output).toMatch(
      /^\{\n {2}"applied": true,\n {2}"result": \{\n {4}"chargeId": "ch_\d+",/m,
    );
    // ...and the batch form for the demo's card is printed with its visibility query.
    expect(output).toMatch(
      /temporal workflow signal --query 'WorkflowType="ReconcileWorkflow" AND ExecutionStatus="Running" AND SideEffectState="waiting" AND SideEffectResource="card:[0-9a-f]+-3"'/,
    );

    const connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
    try {
      const client = new Client({ connection });
      await client.workflow
        .getHandle(reconcileWorkflowId(key!))
        .signal(resolveSignal, JSON.parse(signal!));
    } finally {
      await connection.close();
    }
    expect(await exited).toBe(0);
    expect(output).toMatch(
      /Order D finished: reconciled, charge ch_\d+; the bank has 1 charge\(s\) for it/,
    );
  }, 600_000);
});

async function until(condition: () => boolean, timeoutMs = 480_000): Promise<true> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return true;
}
