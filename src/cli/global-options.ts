import type { GlobalOptions, Options } from './command.js';
import { OUTPUTS, type Output } from './output.js';

/**
 * The options every command takes, named as the temporal CLI names them (`-o`, `-n`,
 * `--address`, `--profile`). They may stand anywhere on the line, before the command too.
 */
export const GLOBAL_OPTIONS = {
  output: {
    type: 'string',
    short: 'o',
    arg: 'text|json|jsonl',
    description:
      'text for people (default); json one document; jsonl one object a line. Times are ISO-8601; errors in JSON are {"error": {"code", "message"}}',
  },
  json: { type: 'boolean', description: 'the same as -o json' },
  connection: {
    type: 'string',
    arg: 'URL',
    description:
      "Postgres; default DATABASE_URL, else the PG* variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, with pg's defaults), as a worker reads them",
  },
  schema: {
    type: 'string',
    arg: 'NAME',
    description: "the store's schema; default SIDEEFFECT_SCHEMA, else sideeffect",
  },
  address: {
    type: 'string',
    arg: 'HOST:PORT',
    description:
      'Temporal, as the temporal CLI takes it; default TEMPORAL_ADDRESS, else 127.0.0.1:7233 (with TEMPORAL_API_KEY, TEMPORAL_TLS*, TEMPORAL_CONFIG_FILE)',
  },
  namespace: {
    type: 'string',
    short: 'n',
    arg: 'NS',
    description: "Temporal's namespace; default TEMPORAL_NAMESPACE, else default",
  },
  profile: {
    type: 'string',
    arg: 'NAME',
    description: 'the Temporal client profile; default TEMPORAL_PROFILE',
  },
  help: {
    type: 'boolean',
    short: 'h',
    description: "this usage; with a command, that command's (as sideeffect help <command>)",
  },
} as const satisfies Options;

/** Only without a command: `sideeffect --version`. */
export const VERSION_OPTION = {
  version: { type: 'boolean', short: 'v', description: 'print the installed version' },
} as const satisfies Options;

/** Where to connect and how to print, from the global options given. */
export function globalOptions(
  values: Readonly<Record<string, unknown>>,
  fail: (message: string) => never,
): GlobalOptions {
  const output = (values.output ?? (values.json ? 'json' : 'text')) as Output;
  if (!OUTPUTS.includes(output)) fail(`-o/--output must be one of ${OUTPUTS.join(', ')}`);
  if (values.json && output === 'text') fail('--json is -o json: give one of them');
  const options: GlobalOptions = { output };
  for (const name of ['connection', 'schema', 'address', 'namespace', 'profile'] as const) {
    const value = values[name];
    if (typeof value !== 'string') continue;
    if (!value.trim()) fail(`--${name} needs a value`);
    options[name] = value;
  }
  return options;
}
