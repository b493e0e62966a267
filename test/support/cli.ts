import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { environment } from '../../src/cli/environment.js';
import { main } from '../../src/cli/main.js';
import { REPO_ROOT, TEMPORAL_ADDRESS } from './temporal.js';

const exec = promisify(execFile);
const BIN = path.join(REPO_ROOT, 'bin/sideeffect.js');

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** How {@link runCli} runs the command; by default in this process. */
export interface CliRunOptions {
  /**
   * Runs the real `bin/sideeffect.js` in a child process instead: for the few tests that cover
   * the binary itself (its start, its exit code as the shell sees it). Each spawn costs a second
   * or more (tsx compiles the CLI), which under load is what timed CLI files out.
   */
  spawn?: boolean;
  /**
   * Only `env` (and the tests' Temporal address) as the environment, none of this process's: a
   * user's machine with nothing configured, however the test machine is set up.
   */
  bare?: boolean;
  /** The answer to a yes/no question; without it nobody can answer, as without a terminal. */
  confirm?: (question: string) => Promise<boolean>;
}

/**
 * Runs the `sideeffect` command line `args` and returns its exit code and output; a non-zero exit
 * is a result, not a throw. In-process by default: the same `main` the binary runs, with the
 * environment passed explicitly (this process's, the tests' Temporal server and then `env`),
 * the repository as the working directory and no terminal, as a spawned command has. It reaches
 * the tests' Temporal server, not whatever `TEMPORAL_ADDRESS` the shell holds; `env` may still
 * name another.
 */
export async function runCli(
  args: string[],
  env: Record<string, string>,
  options: CliRunOptions = {},
): Promise<CliRun> {
  const environmentOf = { ...(options.bare ? {} : process.env), TEMPORAL_ADDRESS, ...env };
  if (options.spawn) return spawnCli(args, environmentOf);
  let stdout = '';
  let stderr = '';
  const output = {
    out: (line: string) => {
      stdout += `${line}\n`;
    },
    err: (line: string) => {
      stderr += `${line}\n`;
    },
    ...(options.confirm ? { confirm: options.confirm } : {}),
  };
  const code = await withoutExit(() =>
    main(args, output, environment(environmentOf, REPO_ROOT)),
  ).catch((error: unknown) => {
    if (error instanceof ExitLeak) throw error;
    // What node does with a throw that escapes the binary's main: the stack on stderr, exit 1.
    stderr += `${error instanceof Error ? error.stack : String(error)}\n`;
    return 1;
  });
  return { code, stdout, stderr };
}

async function spawnCli(args: string[], env: NodeJS.ProcessEnv): Promise<CliRun> {
  try {
    const { stdout, stderr } = await exec(process.execPath, [BIN, ...args], {
      cwd: REPO_ROOT,
      env,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as CliRun;
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

/** The CLI ended or marked the process instead of returning its exit code. */
class ExitLeak extends Error {}

let running = 0;
const realExit = process.exit;

/**
 * Runs `run` with `process.exit` refused and `process.exitCode` kept: the CLI reports by the code
 * main returns, and a command that ended the process instead would end the test file with it.
 */
async function withoutExit<T>(run: () => Promise<T>): Promise<T> {
  const exitCode = process.exitCode;
  running += 1;
  process.exit = ((code?: number) => {
    throw new ExitLeak(
      `the CLI called process.exit(${code ?? ''}); main must return its exit code`,
    );
  }) as typeof process.exit;
  let result: T;
  try {
    result = await run();
  } finally {
    running -= 1;
    if (running === 0) process.exit = realExit;
  }
  if (process.exitCode !== exitCode) {
    const changed = process.exitCode;
    process.exitCode = exitCode;
    throw new ExitLeak(`the CLI set process.exitCode to ${changed}; main must return it instead`);
  }
  return result;
}
