/**
 * The first mistakes a new user makes, each by what they see, must each find an entry in
 * docs/troubleshooting.md: a `###` heading naming the message, warning, code or symptom. The
 * messages come from the code that prints them (the source's own text, or the message produced),
 * so rewording one without its entry fails here. Error codes are checked one by one in
 * test/docs/docs.test.ts.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveKey } from '../../src/cli/commands/resolve/deliver.js';
import { Runner } from '../../src/core/index.js';
import { MemoryStore } from '../../src/store/memory.js';
import { REPO_ROOT } from '../support/temporal.js';

const read = (file: string) => readFileSync(path.join(REPO_ROOT, file), 'utf8');
const headings = read('docs/troubleshooting.md')
  .split('\n')
  .filter((line) => line.startsWith('### '));

/** The heading whose text holds `phrase` (backticks ignored), or undefined. */
const entry = (phrase: string) =>
  headings.find((heading) => heading.replaceAll('`', '').includes(phrase.replaceAll('`', '')));

describe('docs/troubleshooting.md covers the first mistakes', () => {
  // [the mistake, the source file that prints it, the text the user sees there and in the heading]
  const printed: Array<[string, string | undefined, string]> = [
    ['no migrations', 'src/core/errors.ts', 'STORE_MISCONFIGURED'],
    ['a bare new pg.Pool()', undefined, 'no PostgreSQL user name specified in startup packet'],
    ['nothing names a database', 'src/store/postgres/connection.ts', 'no database to connect to'],
    ['no plugin on the worker', undefined, 'is not registered on this Worker'],
    ['an activity named like an effect', 'src/core/errors.ts', 'ACTIVITY_NAME_CLASH'],
    ['no search attributes, required', 'src/core/errors.ts', 'SEARCH_ATTRIBUTES_MISSING'],
    ['no search attributes: the warning', 'src/worker/plugin.ts', 'lacks the search attribute(s)'],
    ['a heartbeat timeout below ttlMs/2', 'src/activities/effect-activity.ts', 'heartbeat'],
    ['a wrong password', undefined, 'password authentication failed'],
    [
      'Temporal down while resolving',
      'src/cli/commands/resolve/deliver.ts',
      'recorded in the store as pending verdict',
    ],
    ['the calling workflow never resumes', undefined, 'the calling workflow stays Running'],
    ['a codec server request without its token', 'src/cli/codec-server.ts', 'UNAUTHORIZED'],
  ];
  it.each(printed)('%s', (_, source, phrase) => {
    if (source) expect(read(source), source).toContain(phrase);
    expect(entry(phrase), phrase).toBeDefined();
  });

  it('a wrong password entry names the SQLSTATEs the store reads as misconfiguration', () => {
    const page = read('docs/troubleshooting.md');
    const body = page.slice(page.indexOf(entry('password authentication failed')!));
    const section = body.slice(0, body.indexOf('\n### ', 4));
    for (const sqlstate of ['28P01', '28000', '3D000', '42501'])
      expect(section).toContain(sqlstate);
  });

  it('a resolve in the wrong namespace: what it prints has its entry', async () => {
    // No ReconcileWorkflow found (another namespace, or no client): the verdict is pending.
    const store = new MemoryStore();
    const runner = new Runner(store, { ttlMs: 30_000 });
    const execution = await runner.execute({ key: 'order-1/pay', resource: 'card' }, async () => {
      throw new Error('gateway timeout');
    });
    expect(execution.outcome).toBe('uncertain');
    const { message } = await resolveKey({
      store,
      client: undefined,
      key: 'order-1/pay',
      input: { applied: false, reason: 'not in the dashboard', by: 'test' },
    });
    expect(message).toMatch(/your verdict is recorded in the store as pending verdict #\d+/);
    expect(entry('recorded in the store as pending verdict')).toBeDefined();
    const section = read('docs/troubleshooting.md').split('### "your verdict is recorded')[1]!;
    expect(section.slice(0, section.indexOf('\n### '))).toMatch(/--namespace/);
  });
});
