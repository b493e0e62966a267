import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { createInterface } from 'node:readline/promises';
import {
  hasCode,
  InvalidSchemaError,
  SideEffectError,
  StoreIsStandbyError,
} from '../core/errors.js';
import { maskConnectionString } from '../core/mask.js';
import { connectionRefusal, connectionTarget, quoteSchema } from '../store/postgres/admin.js';
import { type Invocation, parseInvocation } from './args.js';
import { help } from './commands/index.js';
import { session } from './context.js';
import { type CliEnvironment, environment } from './environment.js';
import { failer, type Io, masked, wantsJson } from './output.js';
import { EXIT, UsageError } from './usage.js';

/**
 * Runs one command line and returns the exit code; all output goes through `out`/`err`. Every
 * line a command prints is masked: a pg or Temporal error may echo the connection string it was
 * given, and a stored reason may carry a credential from an apply's error. Usage texts and
 * generated SQL are ours, and print as written.
 */
export async function main(
  argv: string[],
  output: Io & {
    /** Asks a yes/no question; absent when nobody can answer (no terminal), so asking refuses. */
    confirm?: (question: string) => Promise<boolean>;
  } = {
    out: (line) => process.stdout.write(`${line}\n`),
    err: (line) => process.stderr.write(`${line}\n`),
    confirm: process.stdin.isTTY && process.stdout.isTTY ? askTerminal : undefined,
  },
  env: CliEnvironment = environment(),
): Promise<number> {
  const io = masked(output);
  let invocation: Invocation;
  try {
    invocation = parseInvocation(argv, safeUser());
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    output.err(`${maskConnectionString(`sideeffect: ${error.message}`)}\n${error.pointer}`);
    if (wantsJson(argv))
      io.out(JSON.stringify({ error: { code: error.code, message: error.message } }));
    return EXIT.usage;
  }
  if (invocation.kind === 'help') {
    output.out(help(invocation.topic));
    return EXIT.ok;
  }
  if (invocation.kind === 'version') {
    output.out(packageVersion());
    return EXIT.ok;
  }
  const { command, options } = invocation;
  const fail = failer(options.output, io);
  const schema = options.schema ?? env.schema;
  if (command.database !== false) {
    try {
      quoteSchema(schema);
    } catch (error) {
      if (!(error instanceof InvalidSchemaError)) throw error;
      return fail(error.code, `--schema/SIDEEFFECT_SCHEMA: ${error.message}`, EXIT.usage, {
        rule: error.rule,
        message: error.message,
      });
    }
  }
  const { ctx, pool, close } = session({
    options,
    env,
    io,
    verbatim: output.out,
    fail,
    confirm: output.confirm,
    schema,
  });
  try {
    return await invocation.run(ctx);
  } catch (error) {
    if (error instanceof UsageError) return fail(error.code, error.message, EXIT.usage);
    const opened = pool();
    // Nothing names a database (refused before connecting): a mistake to fix, as a refusal is.
    if (!opened && hasCode(error, 'STORE_MISCONFIGURED'))
      return fail(error.code, error.message, EXIT.usage);
    // The user, password, database or a privilege refused: a mistake to fix, not an outage.
    const refused =
      opened && connectionRefusal(opened, error, schema, GRANTS_FOR[invocation.command.name]);
    if (refused) return fail(refused.code, refused.message, EXIT.usage);
    // Raised on the connection, so a store call carries it as the cause of "unavailable".
    const standby = standbyIn(error);
    if (standby) return fail(standby.code, standby.message, EXIT.refused, { host: standby.host });
    const unreadable = unreadableEncoding(error);
    if (unreadable) return fail('DATA_CONVERTER', unreadable, EXIT.usage);
    const code = error instanceof SideEffectError ? error.code : 'UNAVAILABLE';
    const message = error instanceof Error ? error.message : String(error);
    if (code === 'STORE_UNAVAILABLE')
      return fail(
        code,
        opened ? `${message} (${connectionTarget(opened)})` : message,
        EXIT.unavailable,
      );
    return fail(code, message, error instanceof SideEffectError ? EXIT.refused : EXIT.unavailable);
  } finally {
    await close();
  }
}

/** The StoreIsStandbyError in `error` or its causes. */
function standbyIn(error: unknown): StoreIsStandbyError | undefined {
  let at = error;
  for (let depth = 0; at instanceof Error && depth < 5; depth++) {
    if (at instanceof StoreIsStandbyError) return at;
    at = at.cause;
  }
  return undefined;
}

/** A yes/no question on the terminal; anything but y or yes is no. */
async function askTerminal(question: string): Promise<boolean> {
  const prompt = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await prompt.question(question)).trim());
  } finally {
    prompt.close();
  }
}

/**
 * What the SDK's "Unknown encoding: binary/encrypted" means to an on-call person: the workflow's
 * payloads are encoded by a codec this CLI was not given. Reported as unreachable (exit 3), it
 * sent people to look for an outage.
 */
function unreadableEncoding(error: unknown): string | undefined {
  let at = error;
  for (let depth = 0; at instanceof Error && depth < 5; depth++) {
    const match = /Unknown encoding: (\S+)/.exec(at.message);
    if (match)
      return `the workflow's payloads are encoded as ${match[1]}, which this CLI cannot read without your data converter: pass --data-converter MODULE (a module exporting the \`dataConverter\` your Client and Worker use, with its codec) or set SIDEEFFECT_DATA_CONVERTER; \`sideeffect show <key>\` says what stands`;
    at = at.cause;
  }
  return undefined;
}

/** The role kind a person's command needs, for the grants a refused privilege advises (else a worker's). */
const GRANTS_FOR: Record<string, 'operator' | 'readonly'> = {
  resolve: 'operator',
  withdraw: 'operator',
  list: 'readonly',
  show: 'readonly',
  stats: 'readonly',
  doctor: 'readonly',
};

function safeUser(): string {
  try {
    return `cli:${userInfo().username}`;
  } catch {
    return 'cli';
  }
}

/** The installed package's version: package.json sits two levels up from src/cli and dist/cli alike. */
function packageVersion(): string {
  const manifest = new URL('../../package.json', import.meta.url);
  return (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version;
}
