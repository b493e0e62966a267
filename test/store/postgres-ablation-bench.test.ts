/**
 * One short round of bench/transactional-ablation.ts, so the bench cannot rot again (issue 47: a
 * variant looked for a statement migration 0017 no longer emits, and the script crashed on main
 * unnoticed). It checks that every variant ran and printed its figures, never what they are: a
 * loaded machine moves timings, and a bench never fails on time.
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { databaseUrl } from '../support/postgres.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('bench/transactional-ablation.ts', () => {
  it('runs a round of every variant and prints each figure', async () => {
    const { stdout } = await promisify(execFile)(
      path.join(root, 'node_modules/.bin/tsx'),
      ['bench/transactional-ablation.ts'],
      {
        cwd: root,
        env: {
          ...process.env,
          DATABASE_URL: databaseUrl(),
          ABLATION_ROUNDS: '1',
          ABLATION_OPS: '3',
          ABLATION_PREPARED: '20',
        },
        timeout: 120_000,
      },
    );
    const figures = (name: string) =>
      stdout
        .split('\n')
        .find((line) => line.startsWith(name))
        ?.slice(name.length)
        .trim()
        .split(/\s+/)
        .map(Number);
    for (const variant of [
      'hand-written (peer)',
      'hand-written, same promise',
      'key row only',
      'required writes',
      'required writes, no 0.2.0 check',
      '+ commit guard (tx_grants row)',
      'commit guard on the key row (proto)',
      'fingerprint once instead (0023)',
      'tx_begin/tx_settle prepared',
      '+ simple query (no reset)',
      'shipped',
      'PgStore (Runner)',
      'PgStore (Runner), key-row lease',
    ]) {
      const row = figures(variant);
      expect(row, variant).toHaveLength(4);
      for (const value of row!) expect(Number.isFinite(value), variant).toBe(true);
    }
    expect(stdout).toMatch(/the session check at 0 and 20 named prepared statements/);
  }, 180_000);
});
