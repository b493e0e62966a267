import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT, TEMPORAL_ADDRESS } from './temporal.js';

const exec = promisify(execFile);
const BIN = path.join(REPO_ROOT, 'bin/sideeffect.js');

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs the real `sideeffect` command in a child process, as an operator would; a non-zero exit is
 * a result, not a throw. It reaches the tests' Temporal server, not whatever `TEMPORAL_ADDRESS` the
 * shell holds; `env` may still name another.
 */
export async function runCli(args: string[], env: Record<string, string>): Promise<CliRun> {
  try {
    const { stdout, stderr } = await exec(process.execPath, [BIN, ...args], {
      cwd: REPO_ROOT,
      env: { ...process.env, TEMPORAL_ADDRESS, ...env },
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as CliRun;
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}
