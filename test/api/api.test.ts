import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { type ApiReport, apiReport } from './api-report.js';

let report: ApiReport;
beforeAll(() => {
  report = apiReport(fileURLToPath(new URL('../..', import.meta.url)));
}, 120_000);

describe('public API', () => {
  it('matches the reviewed report (update with `npx vitest run test/api -u`)', async () => {
    await expect(report.text).toMatchFileSnapshot('./api-report.md');
  });

  it('names a type the checker cannot resolve as the declaration writes it, not `any`', () => {
    expect(report.text).toContain('  recheckEvery?: Duration\n');
    expect(report.text).not.toMatch(/recheckEvery\?: any/);
  });

  it('every optional member of an exported *Options interface documents its @default', () => {
    expect(report.undocumentedDefaults).toEqual([]);
  });
});
