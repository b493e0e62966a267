import { parseArgs } from 'node:util';
import type { KeyState } from '../core/types.js';
import { parseDuration } from '../protocol/duration.js';
import type { RoleKind } from '../store/postgres/grants.js';
import type { ResourceSelection } from './resolve-batch.js';
import { HELP, UsageError } from './usage.js';

/** A parsed command line; every field is checked, so commands never see malformed input. */
export type Command =
  | { name: 'help'; topic: string }
  | { name: 'version' }
  | {
      name: 'migrate';
      json: boolean;
      printSql: boolean;
      status: boolean;
      dryRun: boolean;
      printGrants?: { role: string; kind: RoleKind };
    }
  | { name: 'list'; json: boolean; state?: KeyState; limit: number }
  | { name: 'show'; json: boolean; key: string }
  | {
      name: 'resolve';
      json: boolean;
      key: string;
      applied: boolean;
      reason: string;
      result: unknown;
      by: string;
      fence?: number;
      /** Module whose `dataConverter` export the Temporal Client uses (`--data-converter`). */
      dataConverter?: string;
      /** How long to wait for the ReconcileWorkflow before holding the verdict in the store. */
      waitMs: number;
      /** `--store-only`: decide in the store at once, unchecked (keys no Temporal worker serves). */
      storeOnly?: boolean;
    }
  | {
      name: 'resolve-batch';
      json: boolean;
      dryRun: boolean;
      /** `--store-only`: decide in the store at once, unchecked (keys no Temporal worker serves). */
      storeOnly?: boolean;
      dataConverter?: string;
      /** Default `by` for every verdict. */
      by: string;
      source:
        | { from: 'resource'; selection: ResourceSelection; applied: boolean; reason: string }
        | { from: 'file'; file: string };
    }
  | { name: 'stats'; json: boolean }
  | {
      name: 'codec-server';
      json: boolean;
      /** Module whose data converter's `payloadCodecs` the server applies. */
      dataConverter?: string;
      host: string;
      port: number;
      /** Browser origins allowed by CORS: the Temporal UI's. */
      corsOrigins: string[];
    }
  | { name: 'purge'; json: boolean; olderThanMs: number; force: boolean; yes: boolean };

/** How results are printed: `text` for people, `json` (one document) or `jsonl` (one object a line) for scripts. */
export type Output = 'text' | 'json' | 'jsonl';

/** Options every command takes: where the store and Temporal are (as the `temporal` CLI names them), and the output. */
export interface GlobalOptions {
  output: Output;
  /** A Postgres connection string; wins over `DATABASE_URL` and the `PG*` variables. */
  connection?: string;
  /** The store's schema; wins over `SIDEEFFECT_SCHEMA`. */
  schema?: string;
  address?: string;
  namespace?: string;
  profile?: string;
}

const GLOBAL = ['json', 'output', 'connection', 'schema', 'address', 'namespace', 'profile'];
const OUTPUTS: readonly Output[] = ['text', 'json', 'jsonl'];
const STATES: readonly KeyState[] = ['free', 'held', 'applying', 'done', 'uncertain'];
const OPTIONS: Record<string, string[]> = {
  migrate: ['print-sql', 'print-grants', 'kind', 'status', 'dry-run'],
  list: ['state', 'limit'],
  resolve: [
    'applied',
    'not-applied',
    'reason',
    'result',
    'by',
    'fence',
    'wait',
    'store-only',
    'resource',
    'older-than',
    'newer-than',
    'from-file',
    'dry-run',
    'data-converter',
  ],
  purge: ['older-than', 'force', 'yes'],
  'codec-server': ['data-converter', 'host', 'port', 'cors-origin'],
};
const VALUED = new Set([
  '--print-grants',
  '--kind',
  '--state',
  '--limit',
  '--reason',
  '--result',
  '--by',
  '--fence',
  '--wait',
  '--older-than',
  '--newer-than',
  '--resource',
  '--from-file',
  '--data-converter',
  '--host',
  '--port',
  '--cors-origin',
  '--connection',
  '--schema',
  '--address',
  '--namespace',
  '--profile',
  '--output',
  '-o',
]);
/** Long enough for a busy worker to take the Update, short enough that a person is not left hanging. */
const DEFAULT_RESOLVE_WAIT_MS = 30_000;
/** The port Temporal's own codec server samples use. */
const DEFAULT_CODEC_PORT = 8888;
/** The dev server's UI (`temporal server start-dev`), under both names a browser may use. */
const DEFAULT_CORS_ORIGINS = ['http://localhost:8233', 'http://127.0.0.1:8233'];

/** A parsed command line; see {@link parseInvocation}. */
export function parseCommand(argv: string[], user = 'cli'): Command {
  return parseInvocation(argv, user).command;
}

/** The command and the options every command takes. */
export function parseInvocation(
  argv: string[],
  user = 'cli',
): { command: Command; options: GlobalOptions } {
  const [name, ...rest] = argv;
  const plain: GlobalOptions = { output: 'text' };
  if (!name || name === '--help' || name === '-h' || name === 'help')
    return { command: { name: 'help', topic: 'main' }, options: plain };
  if (name === '--version' || name === '-v' || name === 'version')
    return { command: { name: 'version' }, options: plain };
  const help = HELP[name];
  if (!help || name === 'main') throw new UsageError(`unknown command "${name}"`, HELP.main!);
  const { values, positionals } = parse(rest, help);
  if (values.help) return { command: { name: 'help', topic: name }, options: plain };
  const stray = Object.keys(values).find(
    (option) => !GLOBAL.includes(option) && !(OPTIONS[name] ?? []).includes(option),
  );
  if (stray) throw new UsageError(`${name} does not take --${stray}`, help);
  const options = globalOptions(values, help);
  return {
    command: command(name, values, positionals, options.output !== 'text', user, help),
    options,
  };
}

function globalOptions(values: ReturnType<typeof parse>['values'], help: string): GlobalOptions {
  const output = (values.output ?? (values.json ? 'json' : 'text')) as Output;
  if (!OUTPUTS.includes(output))
    throw new UsageError(`-o/--output must be one of ${OUTPUTS.join(', ')}`, help);
  if (values.json && output === 'text')
    throw new UsageError('--json is -o json: give one of them', help);
  const options: GlobalOptions = { output };
  for (const name of ['connection', 'schema', 'address', 'namespace', 'profile'] as const) {
    const value = values[name];
    if (value === undefined) continue;
    if (!value.trim()) throw new UsageError(`--${name} needs a value`, help);
    options[name] = value;
  }
  return options;
}

function command(
  name: string,
  values: ReturnType<typeof parse>['values'],
  positionals: string[],
  json: boolean,
  user: string,
  help: string,
): Command {
  const one = (what: string): string => {
    if (positionals.length !== 1 || !positionals[0])
      throw new UsageError(`expected exactly one ${what}`, help);
    return positionals[0];
  };
  const none = () => {
    if (positionals.length > 0)
      throw new UsageError(`unexpected argument "${positionals[0]}"`, help);
  };
  switch (name) {
    case 'migrate': {
      none();
      const modes = ['print-sql', 'print-grants', 'status', 'dry-run'].filter(
        (mode) => values[mode as 'status'] !== undefined,
      );
      if (modes.length > 1)
        throw new UsageError(`give one of --${modes.join(', --')}, not several`, help);
      return {
        name,
        json,
        printSql: values['print-sql'] === true,
        status: values.status === true,
        dryRun: values['dry-run'] === true,
        ...grants(values, help),
      };
    }
    case 'stats':
      none();
      return { name, json };
    case 'list': {
      none();
      const state = values.state as KeyState | undefined;
      if (state !== undefined && !STATES.includes(state)) {
        throw new UsageError(`--state must be one of ${STATES.join(', ')}`, help);
      }
      const limit = values.limit === undefined ? 50 : Number(values.limit);
      if (!Number.isSafeInteger(limit) || limit <= 0)
        throw new UsageError('--limit must be a positive integer', help);
      return state ? { name, json, state, limit } : { name, json, limit };
    }
    case 'show':
      return { name, json, key: one('key') };
    case 'resolve': {
      const converter = values['data-converter'];
      if (converter === '') throw new UsageError('--data-converter needs a module path', help);
      const dataConverter = converter === undefined ? {} : { dataConverter: converter };
      if (values.resource !== undefined || values['from-file'] !== undefined) {
        none();
        if (values.wait !== undefined) throw new UsageError('--wait goes with a single key', help);
        const storeOnly = values['store-only'] === true ? { storeOnly: true } : {};
        return { ...parseBatch(values, json, user, help), ...dataConverter, ...storeOnly };
      }
      for (const batchOnly of ['older-than', 'newer-than', 'dry-run'] as const) {
        if (values[batchOnly] !== undefined)
          throw new UsageError(`--${batchOnly} goes with --resource or --from-file`, help);
      }
      const key = one('key');
      if (values.applied === values['not-applied']) {
        throw new UsageError('give exactly one of --applied or --not-applied', help);
      }
      const reason = typeof values.reason === 'string' ? values.reason.trim() : '';
      if (!reason) throw new UsageError('--reason is required: say why you judged it so', help);
      if (values.result !== undefined && !values.applied) {
        throw new UsageError('--result only goes with --applied', help);
      }
      // A default would record `null` for an effect whose callers expect a value, for good.
      if (values.applied && values.result === undefined) {
        throw new UsageError(
          '--applied needs --result JSON: what the effect returned (--result null for an effect that returns nothing)',
          help,
        );
      }
      let result: unknown = null;
      if (typeof values.result === 'string') {
        try {
          result = JSON.parse(values.result);
        } catch {
          throw new UsageError(`--result is not valid JSON: ${values.result}`, help);
        }
      }
      const by = typeof values.by === 'string' && values.by ? values.by : user;
      const waitMs =
        values.wait === undefined ? DEFAULT_RESOLVE_WAIT_MS : duration(values.wait, 'wait', help);
      const storeOnly = values['store-only'] === true;
      if (storeOnly && values.wait !== undefined)
        throw new UsageError('--store-only asks no ReconcileWorkflow: it takes no --wait', help);
      const resolve = {
        name,
        json,
        key,
        applied: values.applied === true,
        reason,
        result,
        by,
        ...dataConverter,
        waitMs,
        ...(storeOnly ? { storeOnly } : {}),
      };
      if (values.fence === undefined) return resolve;
      const fence = Number(values.fence);
      if (!/^\d+$/.test(String(values.fence)) || !Number.isSafeInteger(fence) || fence < 1)
        throw new UsageError(
          '--fence must be the fence of the uncertain attempt (a positive integer)',
          help,
        );
      return { ...resolve, fence };
    }
    case 'codec-server': {
      none();
      const converter = values['data-converter'];
      if (converter === '') throw new UsageError('--data-converter needs a module path', help);
      const port = values.port === undefined ? DEFAULT_CODEC_PORT : Number(values.port);
      if (!/^\d+$/.test(values.port ?? '0') || !Number.isSafeInteger(port) || port > 65_535)
        throw new UsageError('--port must be a port number (0 picks a free one)', help);
      const host = values.host ?? '127.0.0.1';
      if (!host.trim()) throw new UsageError('--host needs an address', help);
      return {
        name,
        json,
        ...(converter === undefined ? {} : { dataConverter: converter }),
        host,
        port,
        corsOrigins: (values['cors-origin'] ?? DEFAULT_CORS_ORIGINS).map((origin) =>
          corsOrigin(origin, help),
        ),
      };
    }
    case 'purge': {
      none();
      return {
        name,
        json,
        olderThanMs: duration(values['older-than'], 'older-than', help),
        force: values.force === true,
        yes: values.yes === true,
      };
    }
  }
  throw new UsageError(`unknown command "${name}"`, HELP.main!);
}

/**
 * A browser origin, `scheme://host[:port]`, as the browser sends it in `Origin`. Never `*`: the
 * server decrypts, and any page the person opens could then read what it decodes.
 */
function corsOrigin(value: string, help: string): string {
  let origin: string | undefined;
  try {
    const url = new URL(value.trim());
    const bare = url.pathname === '/' && !url.search && !url.hash && !url.username;
    if (bare && (url.protocol === 'http:' || url.protocol === 'https:')) origin = url.origin;
  } catch {
    // Not a URL: refused below.
  }
  if (origin === undefined)
    throw new UsageError(
      `--cors-origin must be the UI's origin, like http://localhost:8233 (scheme, host, port; no path, no *): ${value}`,
      help,
    );
  return origin;
}

/** `migrate --print-grants ROLE --kind KIND`: both or neither. */
function grants(
  values: ReturnType<typeof parse>['values'],
  help: string,
): { printGrants?: { role: string; kind: RoleKind } } {
  const role = values['print-grants'];
  const kind = values.kind;
  if (role === undefined && kind === undefined) return {};
  if (typeof role !== 'string' || !role)
    throw new UsageError('--print-grants needs a role name', help);
  if (kind !== 'runtime' && kind !== 'operator' && kind !== 'readonly')
    throw new UsageError('--print-grants needs --kind runtime, operator or readonly', help);
  return { printGrants: { role, kind } };
}

/** The library's own duration format (what `recheckEvery` takes), so `1h30m` and `'1 hour'` work here too. */
function duration(value: unknown, option: string, help: string): number {
  const ms =
    typeof value === 'string' && !/^\s*\d+(\.\d+)?\s*$/.test(value)
      ? parseDuration(value)
      : undefined;
  if (ms === undefined)
    throw new UsageError(`--${option} must be a duration like 30d, 12h, 1h30m or "2 days"`, help);
  if (ms <= 0) throw new UsageError(`--${option} must be more than zero`, help);
  return ms;
}

/** `resolve --resource R ...` or `resolve --from-file F`: one verdict for many keys, or one per line. */
function parseBatch(
  values: ReturnType<typeof parse>['values'],
  json: boolean,
  user: string,
  help: string,
): Extract<Command, { name: 'resolve-batch' }> {
  const dryRun = values['dry-run'] === true;
  const by = typeof values.by === 'string' && values.by ? values.by : user;
  if (values.resource !== undefined && values['from-file'] !== undefined)
    throw new UsageError('give --resource or --from-file, not both', help);
  if (typeof values['from-file'] === 'string') {
    const perLine = [
      'applied',
      'not-applied',
      'reason',
      'result',
      'fence',
      'older-than',
      'newer-than',
    ];
    const stray = perLine.find((option) => values[option as keyof typeof values] !== undefined);
    if (stray)
      throw new UsageError(
        `--${stray} does not go with --from-file: each line carries its verdict`,
        help,
      );
    if (!values['from-file']) throw new UsageError('--from-file needs a file name', help);
    return {
      name: 'resolve-batch',
      json,
      dryRun,
      by,
      source: { from: 'file', file: values['from-file'] },
    };
  }
  const resource = typeof values.resource === 'string' ? values.resource : '';
  if (!resource) throw new UsageError('--resource needs a resource name', help);
  if (values.applied === values['not-applied'])
    throw new UsageError('give exactly one of --applied or --not-applied', help);
  if (values.fence !== undefined)
    throw new UsageError(
      '--fence does not go with --resource: each key has its own episode, and a verdict without one judges the current episode',
      help,
    );
  if (values.result !== undefined)
    throw new UsageError(
      '--result does not go with --resource: every key would get the same result; put per-key results in --from-file',
      help,
    );
  const reason = typeof values.reason === 'string' ? values.reason.trim() : '';
  if (!reason) throw new UsageError('--reason is required: say why you judged it so', help);
  const selection: ResourceSelection = { resource };
  if (values['older-than'] !== undefined)
    selection.olderThanMs = duration(values['older-than'], 'older-than', help);
  if (values['newer-than'] !== undefined)
    selection.newerThanMs = duration(values['newer-than'], 'newer-than', help);
  return {
    name: 'resolve-batch',
    json,
    dryRun,
    by,
    source: { from: 'resource', selection, applied: values.applied === true, reason },
  };
}

function parse(args: string[], help: string) {
  try {
    return parseArgs({
      // `--limit -1` must reach our own check ("must be a positive integer"), not read as an option.
      args: args.map((arg, i) =>
        /^-\d/.test(arg) && VALUED.has(args[i - 1] ?? '') ? ` ${arg}` : arg,
      ),
      allowPositionals: true,
      strict: true,
      options: {
        json: { type: 'boolean' },
        'print-sql': { type: 'boolean' },
        'print-grants': { type: 'string' },
        kind: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
        state: { type: 'string' },
        limit: { type: 'string' },
        applied: { type: 'boolean' },
        'not-applied': { type: 'boolean' },
        reason: { type: 'string' },
        result: { type: 'string' },
        by: { type: 'string' },
        fence: { type: 'string' },
        wait: { type: 'string' },
        'store-only': { type: 'boolean' },
        'older-than': { type: 'string' },
        'newer-than': { type: 'string' },
        resource: { type: 'string' },
        'from-file': { type: 'string' },
        'dry-run': { type: 'boolean' },
        force: { type: 'boolean' },
        yes: { type: 'boolean', short: 'y' },
        'data-converter': { type: 'string' },
        host: { type: 'string' },
        port: { type: 'string' },
        'cors-origin': { type: 'string', multiple: true },
        status: { type: 'boolean' },
        connection: { type: 'string' },
        schema: { type: 'string' },
        address: { type: 'string' },
        namespace: { type: 'string' },
        profile: { type: 'string' },
        output: { type: 'string', short: 'o' },
      },
    });
  } catch (error) {
    throw new UsageError((error as Error).message, help);
  }
}
