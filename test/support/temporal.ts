/**
 * How tests find and connect to Temporal: one shared local dev server (`temporal server start-dev`,
 * started by ./temporal-dev.sh), not TestWorkflowEnvironment (its binary download fails offline).
 *
 *   import { TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, uniqueTaskQueue } from '../support/temporal.js';
 *   const connection = await NativeConnection.connect({ address: TEMPORAL_ADDRESS });
 *   const taskQueue = uniqueTaskQueue('lease');
 *
 * test/support/global-setup.ts already ensured the server runs before any test file starts.
 */
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Connection } from '@temporalio/client';

/** Where ./temporal-dev.sh serves the project's dev server and its UI; it takes no other. */
export const DEV_SERVER_ADDRESS = '127.0.0.1:7233';
export const DEV_SERVER_UI_URL = 'http://localhost:8233';

/**
 * Where the tests find Temporal, read here and nowhere else. Their own variables, not
 * `TEMPORAL_ADDRESS`: a developer's shell may point that at a real cluster, which the tests must
 * never create namespaces on or flood with workflows. Unset, the project's dev server.
 */
export const TEMPORAL_ADDRESS = process.env.SIDEEFFECT_TEST_TEMPORAL_ADDRESS || DEV_SERVER_ADDRESS;
export const TEMPORAL_NAMESPACE = 'default';
/** The server's web UI, without a trailing slash (tests append `/namespaces/...`). */
export const TEMPORAL_UI_URL = (
  process.env.SIDEEFFECT_TEST_TEMPORAL_UI || DEV_SERVER_UI_URL
).replace(/\/+$/, '');
/** True when the tests use a server of the developer's choice: ./temporal-dev.sh cannot start that one. */
const ADDRESS_OVERRIDDEN = Boolean(process.env.SIDEEFFECT_TEST_TEMPORAL_ADDRESS);
/** Custom search attributes that temporal-dev.sh registers at start (all Keyword). */
export const SEARCH_ATTRIBUTES = [
  'SideEffectKey',
  'SideEffectResource',
  'SideEffectState',
] as const;

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const TEMPORAL_DEV_SCRIPT = path.join(REPO_ROOT, 'temporal-dev.sh');

/** Folder with the dev server's state, pid file, log and CLI venv (same rule as temporal-dev.sh). */
export function temporalHome(): string {
  return process.env.SIDEEFFECT_TEMPORAL_HOME ?? path.join(REPO_ROOT, '.temporal');
}

let cliPath: string | undefined;

/** Path of the `temporal` CLI, found (or installed) exactly as temporal-dev.sh does. */
export function temporalCliPath(): string {
  if (cliPath === undefined) {
    cliPath = execFileSync(TEMPORAL_DEV_SCRIPT, ['--print-cli'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    }).trim();
  }
  return cliPath;
}

/** A task queue name no other test (or earlier run against the persistent server) uses. */
export function uniqueTaskQueue(prefix: string): string {
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
}

function portOpen(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port, timeout: timeoutMs });
    const done = (open: boolean) => {
      socket.destroy();
      resolve(open);
    };
    socket.once('connect', () => done(true));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
  });
}

/** True if a Temporal frontend answers a real call at TEMPORAL_ADDRESS. */
export async function temporalAnswers(timeoutMs = 3_000): Promise<boolean> {
  const at = TEMPORAL_ADDRESS.lastIndexOf(':');
  const host = TEMPORAL_ADDRESS.slice(0, at).replace(/^\[|\]$/g, '');
  const port = Number(TEMPORAL_ADDRESS.slice(at + 1));
  // A closed port fails at once; the gRPC client would keep retrying until its timeout.
  if (!(await portOpen(host, port, timeoutMs))) return false;
  let connection: Connection | undefined;
  try {
    connection = await Connection.connect({
      address: TEMPORAL_ADDRESS,
      connectTimeout: timeoutMs,
    });
    const conn = connection;
    await conn.withDeadline(Date.now() + timeoutMs, () => conn.workflowService.getSystemInfo({}));
    return true;
  } catch {
    return false;
  } finally {
    await connection?.close().catch(() => {});
  }
}

function runDevScript(): Promise<void> {
  return new Promise((resolve, reject) => {
    // The script's progress goes to stderr; its stdout is just the UI line.
    const child = execFile(
      TEMPORAL_DEV_SCRIPT,
      [],
      { encoding: 'utf8' },
      (error, stdout, stderr) => {
        if (error) {
          reject(
            new Error(
              `./temporal-dev.sh failed (${error.message.split('\n')[0]}):\n${stderr}${stdout}\n` +
                'Start it by hand to see more, or stop whatever holds ports 7233/8233.',
            ),
          );
        } else {
          resolve();
        }
      },
    );
    child.stderr?.pipe(process.stderr);
  });
}

let ensured: Promise<{ address: string; uiUrl: string }> | undefined;

/**
 * Makes sure a Temporal server answers at TEMPORAL_ADDRESS. Any server that answers is used
 * (ours or not); otherwise ./temporal-dev.sh starts the project's dev server, which keeps running
 * after the tests so that later runs reuse it (stop it with `./temporal-dev.sh --stop`). With
 * SIDEEFFECT_TEST_TEMPORAL_ADDRESS set nothing is started: the script only serves DEV_SERVER_ADDRESS,
 * and a server started there would not be the one the tests were told to use.
 */
export function ensureTemporalDevServer(
  log: (line: string) => void = () => {},
): Promise<{ address: string; uiUrl: string }> {
  ensured ??= (async () => {
    if (!(await temporalAnswers())) {
      if (ADDRESS_OVERRIDDEN) {
        throw new Error(
          `no Temporal server answers at SIDEEFFECT_TEST_TEMPORAL_ADDRESS=${TEMPORAL_ADDRESS}; ` +
            'start one there, or unset it to let ./temporal-dev.sh start the project dev server',
        );
      }
      log(`no Temporal server at ${TEMPORAL_ADDRESS}; starting one with ./temporal-dev.sh ...`);
      await runDevScript();
      if (!(await temporalAnswers(10_000))) {
        throw new Error(
          `./temporal-dev.sh reported success but ${TEMPORAL_ADDRESS} does not answer; ` +
            `see ${path.join(temporalHome(), 'server.log')}`,
        );
      }
    }
    return { address: TEMPORAL_ADDRESS, uiUrl: TEMPORAL_UI_URL };
  })();
  ensured.catch(() => {
    ensured = undefined;
  });
  return ensured;
}

/**
 * A new namespace on the dev server, created with the real CLI: it has none of the library's
 * search attributes until a test registers them.
 */
export async function freshNamespace(prefix: string): Promise<string> {
  const namespace = `${prefix}-${randomBytes(4).toString('hex')}`;
  await runTemporalCli(['operator', 'namespace', 'create', '--namespace', namespace]);
  return namespace;
}

/** Runs a printed `temporal ...` command line (no quoting in it) against the dev server. */
export async function runPrinted(command: string): Promise<void> {
  const [program, ...args] = command.trim().split(/\s+/);
  if (program !== 'temporal') throw new Error(`not a temporal command: ${command}`);
  await runTemporalCli(args);
}

async function runTemporalCli(args: string[]): Promise<string> {
  const { stdout } = await promisify(execFile)(temporalCliPath(), [
    ...args,
    '--address',
    TEMPORAL_ADDRESS,
  ]);
  return stdout;
}
