import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { apiReport } from './api-report.js';

describe('public API', () => {
  it('matches the reviewed report (update with `npx vitest run test/api -u`)', async () => {
    const root = fileURLToPath(new URL('../..', import.meta.url));
    await expect(apiReport(root)).toMatchFileSnapshot('./api-report.md');
  }, 60_000);
});
