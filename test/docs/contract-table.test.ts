/**
 * The table of docs/versioning.md names what a release may not break. Kept by hand it drifted (an
 * entry point, a signal and the probe's activity name were missing or stale), so each row's
 * names are checked here against what the code defines: package.json's `exports`, the activity
 * names, messages and search attributes of src/protocol, and the workflows src/workflows exports.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { SideEffectFailureType } from '../../src/protocol/failures.js';
import * as wire from '../../src/protocol/wire.js';
import * as workflows from '../../src/workflows/index.js';
import { REPO_ROOT } from '../support/temporal.js';

const doc = readFileSync(path.join(REPO_ROOT, 'docs/versioning.md'), 'utf8');

/** The second cell of the contract table's row whose first cell is `contract`. */
function row(contract: string): string {
  const line = doc.split('\n').find((l) => l.startsWith(`| ${contract} |`));
  expect(line, `docs/versioning.md has a contract row "${contract}"`).toBeDefined();
  return line!.split('|')[2]!;
}

/** The `code` spans of a piece of text, in order, each once. */
function names(text: string): string[] {
  return [...new Set([...text.matchAll(/`([^`]+)`/g)].map((m) => m[1]!))];
}

const sorted = (list: Iterable<string>) => [...list].sort();

describe('the contract table of docs/versioning.md', () => {
  it("names every entry point of package.json's exports", () => {
    const manifest = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as {
      exports: Record<string, unknown>;
    };
    const entries = Object.keys(manifest.exports).map((key) =>
      key === '.' ? 'sideeffect' : key.slice(1),
    );
    const listed = names(row('the exported API')).filter(
      (name) => name === 'sideeffect' || name.startsWith('/'),
    );
    expect(sorted(listed)).toEqual(sorted(entries));
  });

  it('names every activity type the workers register, the 0.1.0 aliases included', () => {
    expect(sorted(names(row('activity names and payloads')))).toEqual(
      sorted([
        wire.probeActivityName('<effect>'),
        ...Object.values(wire.libraryActivityNames),
        ...Object.values(wire.legacyActivityNames),
        wire.legacyProbeActivityName('<effect>'),
      ]),
    );
  });

  it('names every workflow the library exports, and its id scheme', () => {
    const exported = Object.entries(workflows)
      .filter(([name, value]) => typeof value === 'function' && name.endsWith('Workflow'))
      .map(([name]) => name);
    expect(exported.length).toBeGreaterThan(0);
    expect(sorted(names(row('workflow names and payloads')))).toEqual(
      sorted([...exported, wire.reconcileWorkflowId('<key>')]),
    );
  });

  it('names every signal, Update and query the ReconcileWorkflow and its callers define, by kind', () => {
    const defined = (Object.values(wire) as unknown[]).filter(
      (value): value is { type: string; name: string } =>
        typeof value === 'object' && value !== null && 'type' in value && 'name' in value,
    );
    const text = row('signals, queries and updates');
    const labels = { signal: 'the signals', update: 'the Update', query: 'the query' } as const;
    const starts = Object.values(labels)
      .map((label) => text.indexOf(label))
      .sort((a, b) => a - b);
    for (const [kind, label] of Object.entries(labels)) {
      const start = text.indexOf(label);
      expect(start, `the row says "${label}"`).toBeGreaterThanOrEqual(0);
      const end = starts.find((at) => at > start) ?? text.length;
      expect(sorted(names(text.slice(start, end))), kind).toEqual(
        sorted(defined.filter((d) => d.type === kind).map((d) => d.name)),
      );
    }
  });

  it('names every failure type', () => {
    const listed = names(row('failure types')).filter(
      (name) => !['type', 'SideEffectFailureType'].includes(name),
    );
    expect(sorted(listed)).toEqual(sorted(Object.values(SideEffectFailureType)));
  });

  it('names every search attribute', () => {
    expect(sorted(names(row('search attributes')))).toEqual(
      sorted(Object.values(wire.searchAttributeKeys).map((key) => key.name)),
    );
  });
});
