/**
 * test/timings.json orders `npm test` (vitest.config.ts): every file it lists exists, and a
 * refresh (`npm run test:timings`) keeps it sorted and free of files that are gone; a missing or
 * broken file costs only the order.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../support/temporal.js';
import { mergeTimings, readTimings, TIMINGS_FILE, timingsSummary } from '../support/timings.js';

const scratch = mkdtempSync(path.join(tmpdir(), 'sideeffect-timings-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe(TIMINGS_FILE, () => {
  it('lists test files that exist, each once', () => {
    const files = readTimings(REPO_ROOT).files.map((entry) => entry.file);
    expect(files.length).toBeGreaterThan(0);
    expect(new Set(files).size).toBe(files.length);
    for (const file of files) {
      expect(file, 'a test file').toMatch(/^test\/.*\.test\.ts$/);
      expect(existsSync(path.join(REPO_ROOT, file)), `${file} exists`).toBe(true);
    }
  });

  it('missing or unreadable: no order, no failure', () => {
    expect(readTimings(path.join(scratch, 'none'))).toEqual({ files: [] });
    mkdirSync(path.join(scratch, 'test'));
    for (const broken of ['{', '{"files": 3}', 'null']) {
      writeFileSync(path.join(scratch, TIMINGS_FILE), broken);
      expect(readTimings(scratch), broken).toEqual({ files: [] });
    }
    writeFileSync(path.join(scratch, TIMINGS_FILE), '{"files": [{"file": "a"}, 7, {"ms": 1}]}');
    expect(readTimings(scratch).files).toEqual([{ file: 'a' }]);
  });

  it('a refresh takes the new times, keeps the unmeasured, drops the gone, slowest first', () => {
    const merged = mergeTimings(
      {
        files: [
          { file: 'a', ms: 10 },
          { file: 'gone', ms: 99 },
          { file: 'b' },
          { file: 'c', ms: 5 },
        ],
      },
      new Map([
        ['c', 40.4],
        ['new', 20],
      ]),
      (file) => file !== 'gone',
      '2026-12-02T00:00:00.000Z',
    );
    expect(merged).toEqual({
      measuredAt: '2026-12-02T00:00:00.000Z',
      files: [{ file: 'c', ms: 40 }, { file: 'new', ms: 20 }, { file: 'a', ms: 10 }, { file: 'b' }],
    });
  });

  it('the summary at the end of a run: its ten slowest files, then the total', () => {
    const run = Array.from({ length: 12 }, (_, i) => ({
      file: `test/f${i}.test.ts`,
      ms: (i + 1) * 1000,
      state: i === 10 ? 'failed' : 'passed',
    }));
    const lines = timingsSummary(run, 30_500).split('\n');
    expect(lines[0]).toBe('the 10 slowest of 12 files:');
    expect(lines.slice(1, 11)).toEqual(
      [12, 11, 10, 9, 8, 7, 6, 5, 4, 3].map(
        (s) => `  ${`${s}.0 s`.padStart(6)}  test/f${s - 1}.test.ts${s === 11 ? ' (failed)' : ''}`,
      ),
    );
    expect(lines[11]).toBe('total: 78.0 s summed over 12 files (1 failed), 30.5 s wall-clock');
    expect(lines).toHaveLength(12);
  });
});
