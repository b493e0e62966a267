import type { KeyState } from '../core/types.js';
import { parseDuration } from '../protocol/duration.js';
import type { RoleKind } from '../store/postgres/grants.js';
import { isLoopback } from './codec-server.js';
import { shellWord } from './format.js';
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
      /**
       * The attempt judged: `--fence N`, or `any` (`--any-attempt`) for whichever attempt is
       * uncertain when the verdict is sent, read from the store and printed. One is required: a
       * verdict about attempt 1 must not decide attempt 2 (a second charge).
       */
      attempt: { fence: number } | 'any';
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
        /** `anyAttempt`: a line without `fence` judges the key's current attempt (`--any-attempt`). */
        | { from: 'file'; file: string; anyAttempt: boolean };
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
      /** File holding the token every request must carry (`--token-file`); else `SIDEEFFECT_CODEC_TOKEN`. */
      tokenFile?: string;
      /** Serve without a token: only on a loopback `host`. */
      insecureNoAuth: boolean;
      maxConcurrent?: number;
      maxInFlightBytes?: number;
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

/**
 * Every option any command takes, with temporal's short flags where they mean the same (`-o`,
 * `-n`). One table, parsed once, so global options may stand anywhere, before the command too.
 */
const SPEC = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'v' },
  'print-sql': { type: 'boolean' },
  'print-grants': { type: 'string' },
  kind: { type: 'string' },
  state: { type: 'string' },
  limit: { type: 'string' },
  applied: { type: 'boolean' },
  'not-applied': { type: 'boolean' },
  reason: { type: 'string' },
  result: { type: 'string' },
  by: { type: 'string' },
  fence: { type: 'string' },
  wait: { type: 'string' },
  'older-than': { type: 'string' },
  'newer-than': { type: 'string' },
  resource: { type: 'string' },
  'from-file': { type: 'string' },
  'dry-run': { type: 'boolean' },
  'any-attempt': { type: 'boolean' },
  'store-only': { type: 'boolean' },
  force: { type: 'boolean' },
  yes: { type: 'boolean', short: 'y' },
  'data-converter': { type: 'string' },
  host: { type: 'string' },
  port: { type: 'string' },
  'cors-origin': { type: 'string', multiple: true },
  'token-file': { type: 'string' },
  'insecure-no-auth': { type: 'boolean' },
  'max-concurrent': { type: 'string' },
  'max-inflight-mb': { type: 'string' },
  status: { type: 'boolean' },
  connection: { type: 'string' },
  schema: { type: 'string' },
  address: { type: 'string' },
  namespace: { type: 'string', short: 'n' },
  profile: { type: 'string' },
  output: { type: 'string', short: 'o' },
} as const satisfies Record<
  string,
  { type: 'string' | 'boolean'; short?: string; multiple?: boolean }
>;

type Spec = typeof SPEC;
/** What the command line said, option by option (`cors-origin` may repeat). */
type Values = {
  -readonly [K in keyof Spec]?: Spec[K]['type'] extends 'boolean'
    ? boolean
    : Spec[K] extends { multiple: true }
      ? string[]
      : string;
};

const GLOBAL = [
  'json',
  'output',
  'connection',
  'schema',
  'address',
  'namespace',
  'profile',
  'help',
];
const OUTPUTS: readonly Output[] = ['text', 'json', 'jsonl'];
const STATES: readonly KeyState[] = ['free', 'held', 'applying', 'done', 'uncertain'];
const OPTIONS: Record<string, string[]> = {
  migrate: ['print-sql', 'print-grants', 'kind', 'status', 'dry-run'],
  list: ['state', 'limit'],
  show: [],
  stats: [],
  resolve: [
    'applied',
    'not-applied',
    'reason',
    'result',
    'by',
    'fence',
    'any-attempt',
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
  'codec-server': [
    'data-converter',
    'host',
    'port',
    'cors-origin',
    'token-file',
    'insecure-no-auth',
    'max-concurrent',
    'max-inflight-mb',
  ],
};
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

/** The command and the options every command takes, which may stand anywhere on the line. */
export function parseInvocation(
  argv: string[],
  user = 'cli',
): { command: Command; options: GlobalOptions } {
  const { values, positionals, unknown, problems } = parse(argv);
  const plain: GlobalOptions = { output: 'text' };
  const [first, ...rest] = positionals;
  if (unknown.length > 0) {
    // Options may precede the command, and an unknown one's value reads as a positional.
    const guess = positionals.find((word) => Object.hasOwn(OPTIONS, word));
    const known = guess ? [...GLOBAL, ...OPTIONS[guess]!] : Object.keys(SPEC);
    const option = unknown[0]!;
    const bare = option.replace(/^-+/, '').split('=')[0]!;
    throw new UsageError(
      `unknown option ${option}${didYouMean(bare, known, '--')}`,
      HELP[guess ?? 'main']!,
    );
  }
  const name = first === 'help' ? undefined : first;
  if (name !== undefined && !Object.hasOwn(OPTIONS, name) && name !== 'version')
    throw new UsageError(`unknown command "${name}"${didYouMean(name, COMMANDS, '')}`, HELP.main!);
  const help = HELP[name ?? 'main'] ?? HELP.main!;
  if (problems.length > 0) throw new UsageError(problems[0]!, help);
  if (first === 'help') {
    // `sideeffect help resolve`: that command's usage.
    const [topic, ...extra] = rest;
    if (topic !== undefined && !Object.hasOwn(OPTIONS, topic))
      throw new UsageError(
        `unknown command "${topic}"${didYouMean(topic, COMMANDS, '')}`,
        HELP.main!,
      );
    if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`, HELP.main!);
    return { command: { name: 'help', topic: topic ?? 'main' }, options: plain };
  }
  if (values.help) return { command: { name: 'help', topic: name ?? 'main' }, options: plain };
  if (name === 'version' || (name === undefined && values.version))
    return { command: { name: 'version' }, options: plain };
  if (name === undefined) {
    const given = Object.keys(values);
    if (given.length === 0) return { command: { name: 'help', topic: 'main' }, options: plain };
    throw new UsageError(`--${given[0]} needs a command: sideeffect <command> [options]`, help);
  }
  const stray = Object.keys(values).find(
    (option) => !GLOBAL.includes(option) && !(OPTIONS[name] ?? []).includes(option),
  );
  if (stray) throw new UsageError(`${name} does not take --${stray}`, help);
  const options = globalOptions(values, help);
  return {
    command: command(name, values, rest, options.output !== 'text', user, help),
    options,
  };
}

const COMMANDS = Object.keys(OPTIONS).concat('help', 'version');

/**
 * `; did you mean --fence?` for the closest known name: a typo (at most two edits, a swap of
 * neighbours counting one) or the start of a name (`--dry` for `--dry-run`); else nothing.
 */
export function didYouMean(given: string, known: readonly string[], prefix: string): string {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const name of known) {
    const distance = name.startsWith(given) && given.length >= 2 ? 1 : editDistance(given, name);
    if (distance < bestDistance) [best, bestDistance] = [name, distance];
  }
  return best !== undefined && bestDistance <= Math.min(2, Math.max(1, given.length - 2))
    ? `; did you mean ${prefix}${best}?`
    : '';
}

/** Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps. */
function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, d[i - 2]![j - 2]! + 1);
      d[i]![j] = best;
    }
  }
  return d[a.length]![b.length]!;
}

function globalOptions(values: Values, help: string): GlobalOptions {
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
  values: Values,
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
      return {
        name,
        json,
        key,
        applied: values.applied === true,
        reason,
        result,
        by,
        attempt: attempt(values, key, help),
        ...dataConverter,
        waitMs,
        ...(storeOnly ? { storeOnly } : {}),
      };
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
      const tokenFile = values['token-file'];
      if (tokenFile === '') throw new UsageError('--token-file needs a file name', help);
      const insecureNoAuth = values['insecure-no-auth'] === true;
      if (insecureNoAuth && tokenFile !== undefined)
        throw new UsageError('give --token-file or --insecure-no-auth, not both', help);
      if (insecureNoAuth && !isLoopback(host))
        throw new UsageError(
          `--insecure-no-auth only goes with a loopback --host (127.0.0.1, ::1, localhost), not ${host}: anyone who reaches ${host} could decrypt your payloads; give --token-file`,
          help,
        );
      const maxConcurrent = positive(values['max-concurrent'], 'max-concurrent', help);
      const maxMb = positive(values['max-inflight-mb'], 'max-inflight-mb', help);
      return {
        name,
        json,
        ...(converter === undefined ? {} : { dataConverter: converter }),
        host,
        port,
        corsOrigins: (values['cors-origin'] ?? DEFAULT_CORS_ORIGINS).map((origin) =>
          corsOrigin(origin, help),
        ),
        ...(tokenFile === undefined ? {} : { tokenFile }),
        insecureNoAuth,
        ...(maxConcurrent === undefined ? {} : { maxConcurrent }),
        ...(maxMb === undefined ? {} : { maxInFlightBytes: maxMb * 1024 * 1024 }),
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

/** A positive integer option, or undefined when not given. */
function positive(value: string | undefined, option: string, help: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < 1)
    throw new UsageError(`--${option} must be a positive integer`, help);
  return n;
}

/** `migrate --print-grants ROLE --kind KIND`: both or neither. */
function grants(values: Values, help: string): { printGrants?: { role: string; kind: RoleKind } } {
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

/**
 * `--fence N` or `--any-attempt`, exactly one. Without either the person is shown how to find the
 * fence and the command with it: a verdict that judges whatever attempt is uncertain when it
 * arrives decides attempt 2 with what was checked about attempt 1.
 */
function attempt(
  values: ReturnType<typeof parse>['values'],
  key: string,
  help: string,
): { fence: number } | 'any' {
  const any = values['any-attempt'] === true;
  if (any && values.fence !== undefined)
    throw new UsageError('give --fence N or --any-attempt, not both', help);
  if (any) return 'any';
  if (values.fence === undefined) {
    const verdict = values.applied
      ? `--applied --result ${shellWord(String(values.result))}`
      : '--not-applied';
    throw new UsageError(
      [
        'which attempt did you check? --fence N is required: N is the fence of the uncertain attempt, which `sideeffect show KEY` prints:',
        `  sideeffect show ${shellWord(key)}`,
        `  sideeffect resolve ${shellWord(key)} ${verdict} --reason ${shellWord(String(values.reason).trim())} --fence N`,
        'A verdict for another attempt is refused. --any-attempt instead decides whichever attempt is uncertain when it is sent (and prints its fence).',
      ].join('\n'),
      help,
    );
  }
  const fence = Number(values.fence);
  if (!/^\d+$/.test(String(values.fence)) || !Number.isSafeInteger(fence) || fence < 1)
    throw new UsageError(
      '--fence must be the fence of the uncertain attempt (a positive integer; sideeffect show KEY prints it)',
      help,
    );
  return { fence };
}

/** `resolve --resource R ...` or `resolve --from-file F`: one verdict for many keys, or one per line. */
function parseBatch(
  values: Values,
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
      source: {
        from: 'file',
        file: values['from-file'],
        anyAttempt: values['any-attempt'] === true,
      },
    };
  }
  const resource = typeof values.resource === 'string' ? values.resource : '';
  if (!resource) throw new UsageError('--resource needs a resource name', help);
  if (values.applied === values['not-applied'])
    throw new UsageError('give exactly one of --applied or --not-applied', help);
  if (values.fence !== undefined)
    throw new UsageError(
      "--fence does not go with --resource: each key has its own attempt; --any-attempt decides each key's current attempt and prints its fence, --from-file takes a fence per key",
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
  if (values['any-attempt'] !== true)
    throw new UsageError(
      '--resource needs --any-attempt: it decides the attempt each key has uncertain when it is sent, without anyone having checked that attempt, and prints each key\'s fence; to name the attempts you checked, put one line per key with its "fence" in --from-file',
      help,
    );
  return {
    name: 'resolve-batch',
    json,
    dryRun,
    by,
    source: { from: 'resource', selection, applied: values.applied === true, reason },
  };
}

const SHORT = new Map(
  Object.entries(SPEC).flatMap(([name, spec]) =>
    'short' in spec ? [[spec.short as string, name as keyof Spec] as const] : [],
  ),
);

/**
 * Reads the whole line against {@link SPEC}: options anywhere, `--name value`, `--name=value`,
 * `-o json`, `-ojson`, `--` ending the options. Unknown options are collected, not thrown, so the
 * message can suggest a name the command takes. A value is never taken from a `--option` (a
 * forgotten value is reported as such) but may start with one dash (`--limit -1`, refused by the
 * option's own check).
 */
function parse(argv: string[]): {
  values: Values;
  positionals: string[];
  unknown: string[];
  problems: string[];
} {
  const values: Record<string, string | boolean | string[]> = {};
  const positionals: string[] = [];
  const unknown: string[] = [];
  const problems: string[] = [];
  const set = (
    name: keyof Spec,
    shown: string,
    inline: string | undefined,
    next: () => string | undefined,
  ) => {
    const spec: { type: string; multiple?: boolean } = SPEC[name];
    if (spec.type === 'boolean') {
      if (inline !== undefined) problems.push(`${shown} takes no value`);
      values[name] = true;
      return;
    }
    const value = inline ?? next();
    if (value === undefined) {
      problems.push(`${shown} needs a value`);
      return;
    }
    values[name] = spec.multiple
      ? [...((values[name] as string[] | undefined) ?? []), value]
      : value;
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const next = () => {
      const candidate = argv[i + 1];
      if (candidate === undefined || candidate.startsWith('--')) return undefined;
      i++;
      return candidate;
    };
    if (arg === '--') {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (arg.startsWith('--')) {
      const [flag, ...inline] = arg.slice(2).split('=');
      if (!Object.hasOwn(SPEC, flag!)) unknown.push(`--${flag}`);
      else set(flag as keyof Spec, `--${flag}`, inline.length ? inline.join('=') : undefined, next);
    } else if (arg.startsWith('-') && arg.length > 1) {
      const name = SHORT.get(arg[1]!);
      if (name === undefined) unknown.push(arg.slice(0, 2));
      else if (SPEC[name].type === 'string')
        set(name, `-${arg[1]}`, arg.length > 2 ? arg.slice(2).replace(/^=/, '') : undefined, next);
      else if (arg.length > 2) unknown.push(arg);
      else set(name, arg, undefined, next);
    } else positionals.push(arg);
  }
  return { values: values as Values, positionals, unknown, problems };
}
