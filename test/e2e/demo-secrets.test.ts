import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT, TEMPORAL_ADDRESS } from '../support/temporal.js';

const exec = promisify(execFile);

describe('the demo', () => {
  it('names an unreachable DATABASE_URL without its password', async () => {
    const failed = await exec(
      process.execPath,
      ['--import', 'tsx', path.join(REPO_ROOT, 'examples/demo.ts')],
      {
        cwd: REPO_ROOT,
        env: {
          ...process.env,
          TEMPORAL_ADDRESS,
          DATABASE_URL: 'postgres://demo:secretpw@127.0.0.1:1/shop',
        },
      },
    ).then(
      () => expect.unreachable('the demo ran without Postgres'),
      (error: { code: number; stdout: string; stderr: string }) => error,
    );
    expect(failed.code).toBe(1);
    expect(failed.stderr).toContain(
      'Postgres does not answer at postgres://demo:***@127.0.0.1:1/shop',
    );
    expect(`${failed.stdout}${failed.stderr}`).not.toContain('secretpw');
  });
});
