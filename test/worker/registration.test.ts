/**
 * The registration command docs/production.md and the worker's warning print, run
 * through the real `temporal` CLI on fresh namespaces of the dev server: it must register every
 * attribute it names, and the worker's check must name exactly the ones still missing.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { missingSearchAttributes } from '../../src/worker/index.js';
import { searchAttributeCreateCommand } from '../../src/worker/search-attributes.js';
import {
  freshNamespace,
  REPO_ROOT,
  runPrinted,
  SEARCH_ATTRIBUTES,
  TEMPORAL_ADDRESS,
} from '../support/temporal.js';
import { waitFor } from '../temporal/harness.js';

let connection: Connection;

beforeAll(async () => {
  connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
});

afterAll(async () => {
  await connection?.close();
});

/** Polls until the namespace lists `expected` as its missing attributes (registration is not instant). */
function missingBecomes(namespace: string, expected: string[]): Promise<string[]> {
  const client = new Client({ connection, namespace });
  return waitFor(
    async () => {
      const missing = await missingSearchAttributes(client, namespace).catch(() => undefined);
      return JSON.stringify(missing) === JSON.stringify(expected) ? missing : undefined;
    },
    `namespace ${namespace} to lack exactly ${expected.join(', ') || 'nothing'}`,
  );
}

/** The registration command of a doc, as written there (with `<ns>`). */
function documentedCommand(file: string): string {
  const text = readFileSync(path.join(REPO_ROOT, file), 'utf8');
  const line = text
    .split('\n')
    .find((candidate) => candidate.trim().startsWith('temporal operator search-attribute create'));
  if (!line) throw new Error(`${file} prints no registration command`);
  return line.trim();
}

describe('search attribute registration', () => {
  it.each(['docs/production.md'])(
    'the command %s prints registers all three on a fresh namespace',
    async (file) => {
      const namespace = await freshNamespace('sa');
      await missingBecomes(namespace, [...SEARCH_ATTRIBUTES]);
      await runPrinted(documentedCommand(file).replace('<ns>', namespace));
      expect(await missingBecomes(namespace, [])).toEqual([]);
    },
  );

  it("names exactly the missing ones, and the worker's command for them registers them", async () => {
    const namespace = await freshNamespace('sa');
    await runPrinted(searchAttributeCreateCommand(namespace, ['SideEffectKey']));
    const missing = await missingBecomes(namespace, ['SideEffectResource', 'SideEffectState']);
    const command = searchAttributeCreateCommand(namespace, missing);
    expect(command).not.toContain('SideEffectKey');
    await runPrinted(command);
    expect(await missingBecomes(namespace, [])).toEqual([]);
  });
});
