import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { createInterface } from 'node:readline/promises';
import { Client, Connection, type DataConverter } from '@temporalio/client';
import type { PayloadCodec } from '@temporalio/common';
import pg from 'pg';
import {
  InvalidSchemaError,
  NotUncertainError,
  SideEffectError,
  StaleVerdictError,
} from '../core/errors.js';
import { decodeJson } from '../core/json.js';
import { maskConnectionString } from '../core/mask.js';
import type { Store, VerdictHolding } from '../core/store.js';
import type { KeyRecord, Result } from '../core/types.js';
import { connectionRefusal, connectionTarget } from '../store/postgres/connection.js';
import {
  connectionConfig,
  grantsScript,
  migrate,
  migrationScript,
  migrationStatus,
  PgStore,
  storeStats,
} from '../store/postgres/index.js';
import { newerSchema } from '../store/postgres/newer-schema.js';
import { defaultSchema, quoteSchema } from '../store/postgres/sql.js';
import { type ClusterOptions, type ClusterSettings, clusterSettings } from '../worker/cluster.js';
import { type Command, type GlobalOptions, type Output, parseInvocation } from './args.js';
import { type CodecServer, startCodecServer, tokenProblem } from './codec-server.js';
import { loadDataConverter } from './data-converter.js';
import { printKey, printList, printStats, shellWord } from './format.js';
import { cliIdentity, resolveKey } from './resolve.js';
import {
  type BatchVerdict,
  printBatch,
  readVerdictFile,
  resolveBatch,
  selectUncertain,
} from './resolve-batch.js';
import { EXIT, HELP, UsageError } from './usage.js';

/** Where the CLI finds the store and Temporal; the same variables the worker and the demo read. */
export interface CliEnvironment {
  /** `DATABASE_URL`, else the `PG*` variables: {@link connectionConfig}, as a worker reads them. */
  database: pg.PoolConfig;
  schema: string;
  /** Temporal's standard client configuration (profile file and TEMPORAL_* variables), read when a command needs Temporal. */
  temporal: (
    overrides: Pick<ClusterOptions, 'address' | 'namespace' | 'profile'>,
  ) => ClusterSettings;
  /** Module of the app's data converter (`SIDEEFFECT_DATA_CONVERTER`); `--data-converter` wins. */
  dataConverterPath?: string;
  /** The codec server's token (`SIDEEFFECT_CODEC_TOKEN`); `--token-file` wins. */
  codecToken?: string;
}

export function environment(env: NodeJS.ProcessEnv = process.env): CliEnvironment {
  return {
    database: connectionConfig({ env }),
    schema: defaultSchema(env),
    temporal: (overrides) => clusterSettings({ env, ...definedOnly(overrides) }),
    ...(env.SIDEEFFECT_DATA_CONVERTER ? { dataConverterPath: env.SIDEEFFECT_DATA_CONVERTER } : {}),
    ...(env.SIDEEFFECT_CODEC_TOKEN !== undefined ? { codecToken: env.SIDEEFFECT_CODEC_TOKEN } : {}),
  };
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/**
 * Runs one command line and returns the exit code; all output goes through `out`/`err`. Every
 * line is masked: a pg or Temporal error may echo the connection string it was given, and a
 * stored reason may carry a credential from an apply's error.
 */
export async function main(
  argv: string[],
  output: {
    out: (line: string) => void;
    err: (line: string) => void;
    /** Asks a yes/no question; absent when nobody can answer (no terminal), so asking refuses. */
    confirm?: (question: string) => Promise<boolean>;
  } = {
    out: (line) => process.stdout.write(`${line}\n`),
    err: (line) => process.stderr.write(`${line}\n`),
    confirm: process.stdin.isTTY && process.stdout.isTTY ? askTerminal : undefined,
  },
  env: CliEnvironment = environment(),
): Promise<number> {
  const io = {
    out: (line: string) => output.out(maskConnectionString(line)),
    err: (line: string) => output.err(maskConnectionString(line)),
  };
  let command: Command;
  let options: GlobalOptions;
  try {
    ({ command, options } = parseInvocation(argv, safeUser()));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.err(`sideeffect: ${error.message}\n\n${error.help}`);
    if (wantsJson(argv))
      io.out(JSON.stringify({ error: { code: error.code, message: error.message } }));
    return EXIT.usage;
  }
  if (command.name === 'help') {
    io.out(HELP[command.topic]!);
    return EXIT.ok;
  }
  if (command.name === 'version') {
    io.out(packageVersion());
    return EXIT.ok;
  }
  const fail = failer(options.output, io);
  if (command.name === 'codec-server') return serveCodec(command, options, io, env, fail);
  const schema = options.schema ?? env.schema;
  try {
    quoteSchema(schema);
  } catch (error) {
    if (!(error instanceof InvalidSchemaError)) throw error;
    return fail(error.code, `--schema/SIDEEFFECT_SCHEMA: ${error.message}`, EXIT.usage, {
      rule: error.rule,
      message: error.message,
    });
  }
  if (command.name === 'migrate' && command.printGrants) {
    output.out(grantsScript({ schema, ...command.printGrants }));
    return EXIT.ok;
  }
  const print = printer(options.output, io.out);
  if (command.name === 'migrate' && command.printSql) {
    // SQL text, printed as written: no reason or connection string is in it.
    const sql = migrationScript({ schema });
    printer(options.output, output.out)(sql, { schema, sql });
    return EXIT.ok;
  }
  let dataConverter: DataConverter | undefined;
  const converterPath =
    command.name === 'resolve' || command.name === 'resolve-batch'
      ? (command.dataConverter ?? env.dataConverterPath)
      : undefined;
  if (converterPath) {
    try {
      dataConverter = await loadDataConverter(converterPath);
    } catch (error) {
      if (!(error instanceof UsageError)) throw error;
      return fail(error.code, error.message, EXIT.usage);
    }
  }
  const database = options.connection ? { connectionString: options.connection } : env.database;
  if (database.connectionString !== undefined && !isPostgresUrl(database.connectionString))
    return fail(
      'USAGE',
      `${options.connection ? '--connection' : 'DATABASE_URL'} is not a Postgres URL: write it as postgres://USER@HOST:PORT/DATABASE`,
      EXIT.usage,
    );
  const pool = new pg.Pool({
    ...database,
    max: 2,
    connectionTimeoutMillis: 5_000,
  });
  pool.on('error', () => {});
  const store = new PgStore({ pool, schema });
  const temporalClient = (connection: Connection, namespace: string) =>
    new Client({
      connection,
      namespace,
      identity: cliIdentity(),
      ...(dataConverter ? { dataConverter } : {}),
    });
  const temporal = () => {
    try {
      return env.temporal({
        address: options.address,
        namespace: options.namespace,
        profile: options.profile,
      });
    } catch (error) {
      // An unknown profile, an unreadable config file: configuration, not an outage.
      throw new UsageError(
        `the Temporal client configuration (--profile, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE): ${(error as Error).message}`,
        HELP.main!,
      );
    }
  };
  try {
    return await run(command, {
      confirm: output.confirm,
      pool,
      store,
      schema,
      temporal,
      print,
      fail,
      io,
      temporalClient,
    });
  } catch (error) {
    if (error instanceof UsageError) return fail(error.code, error.message, EXIT.usage);
    // The user, password, database or a privilege refused: a mistake to fix, not an outage.
    const refused = connectionRefusal(pool, error, schema);
    if (refused) return fail(refused.code, refused.message, EXIT.usage);
    const code = error instanceof SideEffectError ? error.code : 'UNAVAILABLE';
    const message = error instanceof Error ? error.message : String(error);
    if (code === 'STORE_UNAVAILABLE')
      return fail(code, `${message} (${connectionTarget(pool)})`, EXIT.unavailable);
    return fail(code, message, error instanceof SideEffectError ? EXIT.refused : EXIT.unavailable);
  } finally {
    await pool.end();
  }
}

/** Reports a failure on stderr (and as `{"error": {code, message}}` in JSON) and returns the exit code. */
type Fail = (code: string, message: string, exit: number, details?: object) => number;

function failer(
  output: Output,
  io: { out: (line: string) => void; err: (line: string) => void },
): Fail {
  return (code, message, exit, details = {}) => {
    io.err(`sideeffect: ${message}`);
    if (output !== 'text')
      io.out(
        JSON.stringify({ error: { code, message: maskConnectionString(message), ...details } }),
      );
    return exit;
  };
}

/** `--json` or `-o json|jsonl` anywhere: a usage error is then answered in JSON too. */
function wantsJson(argv: string[]): boolean {
  return argv.some(
    (arg, i) =>
      arg === '--json' ||
      /^(-o|--output)=?(json|jsonl)$/.test(arg) ||
      (['-o', '--output'].includes(argv[i - 1] ?? '') && /^jsonl?$/.test(arg)),
  );
}

/**
 * Text for people; `json` one indented document; `jsonl` one compact object a line (each item of
 * a list on its own line), for `jq` and log pipelines. Times in JSON are ISO-8601, as in text.
 */
function printer(output: Output, out: (line: string) => void) {
  return (human: string, json: unknown) => {
    if (output === 'text') out(human);
    else if (output === 'json') out(JSON.stringify(json, null, 2));
    else for (const item of Array.isArray(json) ? json : [json]) out(JSON.stringify(item));
  };
}

interface Context {
  /** Asks the person at the terminal; absent when there is none. */
  confirm: ((question: string) => Promise<boolean>) | undefined;
  pool: pg.Pool;
  store: Store & VerdictHolding;
  schema: string;
  temporal: () => ClusterSettings;
  print: (human: string, json: unknown) => void;
  fail: Fail;
  io: { out: (line: string) => void; err: (line: string) => void };
  /** A Client through the app's data converter, when one was given. */
  temporalClient: (connection: Connection, namespace: string) => Client;
}

async function run(
  command: Exclude<Command, { name: 'help' | 'version' | 'codec-server' }>,
  ctx: Context,
): Promise<number> {
  const { store, print } = ctx;
  switch (command.name) {
    case 'migrate': {
      const { schema } = ctx;
      if (command.status || command.dryRun) {
        const status = await migrationStatus(ctx.pool, { schema });
        const { unknown } = status;
        // What migrate() itself would refuse, in its words.
        const newer = newerSchema(status);
        if (command.dryRun && newer && 'refused' in newer)
          return ctx.fail(newer.refused.code, newer.refused.message, EXIT.refused, {
            schema,
            unknown,
          });
        if (command.dryRun) {
          print(
            status.pending.length
              ? `would apply ${status.pending.join(', ')} to schema ${schema} (dry run: nothing changed)`
              : `schema ${schema} is up to date (dry run: nothing changed)`,
            { schema, dryRun: true, pending: status.pending },
          );
          return EXIT.ok;
        }
        print(
          [
            `schema ${schema}: ${status.applied.length} applied, ${status.pending.length} pending`,
            ...status.applied.map((m) => `  applied  ${m.appliedAt}  ${m.name}`),
            ...status.pending.map((name) => `  pending  ${name}`),
            ...(newer ? [`  ${'refused' in newer ? newer.refused.message : newer.accepted}`] : []),
            ...(status.pending.length
              ? ['run `sideeffect migrate` to apply the pending ones']
              : []),
          ].join('\n'),
          { schema, applied: status.applied, pending: status.pending, unknown },
        );
        return EXIT.ok;
      }
      const applied = await migrate(ctx.pool, { schema });
      print(
        applied.length
          ? `applied ${applied.join(', ')} to schema ${schema}`
          : `schema ${schema} is up to date`,
        { schema, applied },
      );
      return EXIT.ok;
    }
    case 'list': {
      const records = await store.list({ state: command.state, limit: command.limit });
      print(printList(records), records.map(jsonRecord));
      return EXIT.ok;
    }
    case 'show': {
      const record = await store.inspect(command.key);
      if (!record)
        return ctx.fail(
          'NOT_FOUND',
          `no key "${command.key}" in schema ${ctx.schema} (check --schema / SIDEEFFECT_SCHEMA and the database)`,
          EXIT.refused,
        );
      const events = await store.events(command.key);
      const held = await store.heldVerdicts(command.key);
      print(printKey(record, events, held), {
        ...jsonRecord(record),
        events: events.map((event) => ({ ...event, at: iso(event.at) })),
        heldVerdicts: held.map(({ result, at, judgedAt, ...verdict }) => ({
          ...verdict,
          ...(result ? { result: jsonResult(result) } : {}),
          at: iso(at),
          ...(judgedAt === undefined ? {} : { judgedAt: iso(judgedAt) }),
        })),
      });
      return EXIT.ok;
    }
    case 'resolve': {
      const temporal = ctx.temporal();
      const connection = command.storeOnly ? undefined : await connectTemporal(temporal);
      try {
        const client = connection && ctx.temporalClient(connection, temporal.namespace);
        if (!client && !command.storeOnly) ctx.io.err(unreachable(temporal));
        const { applied, reason, result, by } = command;
        const fence =
          command.attempt === 'any'
            ? await currentAttempt(store, command.key)
            : command.attempt.fence;
        if (command.attempt === 'any' && fence !== undefined)
          ctx.io.err(
            `sideeffect: --any-attempt: deciding the attempt with fence ${fence}, the key's latest`,
          );
        const input = {
          applied,
          reason,
          by,
          ...(applied ? { result } : {}),
          ...(fence === undefined ? {} : { fence }),
        };
        const outcome = await resolveKey({
          store,
          client,
          key: command.key,
          input,
          waitMs: command.waitMs,
          ...(command.storeOnly ? { storeOnly: true } : {}),
        });
        // The JSON on stdout says it too; a person piping it should still see this.
        if ((outcome.timedOut || outcome.pending) && command.json)
          ctx.io.err(`sideeffect: ${outcome.message}`);
        print(outcome.message, outcome);
        // Held, not decided: the waiting workflow was not told (a wrong --namespace lands here too).
        if (outcome.pending) return EXIT.unavailable;
        if (!outcome.won) return EXIT.refused;
        return client || command.storeOnly ? EXIT.ok : EXIT.unavailable;
      } catch (error) {
        if (error instanceof StaleVerdictError)
          return ctx.fail(
            error.code,
            `${error.message}: ${fencedCommand(command, error)}`,
            EXIT.refused,
            {
              fence: error.fence,
              currentFence: error.currentFence,
              state: error.state,
            },
          );
        if (!(error instanceof NotUncertainError)) throw error;
        return ctx.fail(error.code, `${error.message}: nothing to resolve`, EXIT.refused, {
          state: error.state,
        });
      } finally {
        await connection?.close();
      }
    }
    case 'resolve-batch':
      return resolveMany(command, ctx);
    case 'stats': {
      const stats = await storeStats(ctx.pool, { schema: ctx.schema });
      print(printStats(stats), stats);
      return EXIT.ok;
    }
    case 'purge': {
      if (!command.yes) {
        const question = `purge done keys older than ${command.olderThanMs / 1000} s from schema ${ctx.schema}? They are forgotten: a retry of one runs its effect again. [y/N] `;
        const confirm = ctx.confirm;
        if (!confirm) {
          return ctx.fail(
            'USAGE',
            'purge needs --yes when stdin or stdout is not a terminal (nobody to ask for confirmation)',
            EXIT.usage,
          );
        }
        if (!(await confirm(question))) {
          return ctx.fail('NOT_CONFIRMED', 'purge not confirmed: nothing deleted', EXIT.refused);
        }
      }
      const purged = await store.purge({ olderThanMs: command.olderThanMs, force: command.force });
      print(`purged ${purged} done key(s)`, { purged });
      return EXIT.ok;
    }
  }
}

/**
 * The key's latest attempt, for `--any-attempt`: sent as the verdict's fence, so the verdict still
 * judges exactly one attempt (the one printed) even if another becomes uncertain on the way.
 * Undefined for a key the store does not know or never granted: the store then says so.
 */
async function currentAttempt(store: Store, key: string): Promise<number | undefined> {
  const record = await store.inspect(key);
  return record && record.fence > 0 ? record.fence : undefined;
}

/** What to run after a stale verdict: check the attempt that stands now, then this command. */
function fencedCommand(
  command: Extract<Command, { name: 'resolve' }>,
  error: StaleVerdictError,
): string {
  if (error.state !== 'uncertain') return `see \`sideeffect show ${shellWord(command.key)}\``;
  const verdict = command.applied
    ? `--applied --result ${shellWord(JSON.stringify(command.result))}`
    : '--not-applied';
  return `sideeffect resolve ${shellWord(command.key)} ${verdict} --reason ${shellWord(command.reason)} --fence ${error.currentFence}`;
}

async function resolveMany(
  command: Extract<Command, { name: 'resolve-batch' }>,
  ctx: Context,
): Promise<number> {
  const { source, by, dryRun } = command;
  let verdicts: BatchVerdict[];
  let selected: string;
  if (source.from === 'file') {
    try {
      verdicts = await readVerdictFile(source.file, by, source.anyAttempt);
      // Lines without a fence judge each key's current attempt: read now and sent with it, so
      // each verdict still names one attempt (the one the summary prints).
      if (source.anyAttempt)
        verdicts = await Promise.all(
          verdicts.map(async (verdict) => {
            if (verdict.fence !== undefined) return verdict;
            const fence = await currentAttempt(ctx.store, verdict.key);
            return fence === undefined ? verdict : { ...verdict, fence };
          }),
        );
    } catch (error) {
      if (!(error instanceof UsageError)) throw error;
      return ctx.fail(error.code, error.message, EXIT.usage);
    }
    selected = `${verdicts.length} verdict(s) from ${source.file}`;
  } else {
    const uncertainNow = await selectUncertain(ctx.store, source.selection, async () => {
      const { rows } = await ctx.pool.query<{ now: string }>(
        `select pg_catalog.floor(extract(epoch from pg_catalog.clock_timestamp()) operator(pg_catalog.*) 1000::numeric)::bigint as now`,
      );
      return Number(rows[0]!.now);
    });
    const { applied, reason } = source;
    verdicts = uncertainNow.map(({ key, fence }) =>
      applied
        ? { key, applied, result: null, reason, by, fence }
        : { key, applied, reason, by, fence },
    );
    selected = `${verdicts.length} uncertain key(s) on ${source.selection.resource}`;
  }
  const storeOnly = command.storeOnly === true;
  const temporal = dryRun || storeOnly ? undefined : ctx.temporal();
  const connection = temporal && (await connectTemporal(temporal));
  try {
    const client = connection && ctx.temporalClient(connection, temporal!.namespace);
    if (temporal && !client) ctx.io.err(unreachable(temporal));
    const report = await resolveBatch({ store: ctx.store, client, verdicts, dryRun, storeOnly });
    ctx.print(printBatch(report, selected), report);
    if (report.failed.length > 0 || report.pending.length > 0 || (temporal && !client))
      return EXIT.unavailable;
    if (report.alreadyDecided.length > 0 || report.refused.length > 0) return EXIT.refused;
    return EXIT.ok;
  } finally {
    await connection?.close();
  }
}

/**
 * `sideeffect codec-server`: the app's payload codecs over Temporal's codec server protocol, so
 * the Temporal UI shows encrypted payloads decoded and encodes what a person sends (a verdict
 * through the `resolve` signal). Runs until SIGINT or SIGTERM.
 */
async function serveCodec(
  command: Extract<Command, { name: 'codec-server' }>,
  options: GlobalOptions,
  io: { out: (line: string) => void; err: (line: string) => void },
  env: CliEnvironment,
  fail: Fail,
): Promise<number> {
  let token: string | undefined;
  let tokenFrom = '';
  if (command.tokenFile !== undefined) {
    try {
      token = readFileSync(command.tokenFile, 'utf8').trim();
    } catch (error) {
      return fail(
        'USAGE',
        `cannot read --token-file ${command.tokenFile}: ${(error as Error).message}`,
        EXIT.usage,
      );
    }
    tokenFrom = `--token-file ${command.tokenFile}`;
  } else if (env.codecToken !== undefined) {
    token = env.codecToken.trim();
    tokenFrom = 'SIDEEFFECT_CODEC_TOKEN';
  }
  if (token !== undefined && command.insecureNoAuth)
    return fail(
      'USAGE',
      '--insecure-no-auth, yet SIDEEFFECT_CODEC_TOKEN is set: unset it or drop --insecure-no-auth',
      EXIT.usage,
    );
  if (token === undefined && !command.insecureNoAuth)
    return fail(
      'USAGE',
      'codec-server needs a token, since it decrypts for whoever calls it: --token-file PATH (make one with `openssl rand -hex 32 > codec.token`) or SIDEEFFECT_CODEC_TOKEN; only on 127.0.0.1, --insecure-no-auth serves every local process without one',
      EXIT.usage,
    );
  const problem = token === undefined ? undefined : tokenProblem(token);
  // No colon after the source: a file named *.token followed by one reads as a secret to mask.
  if (problem) return fail('USAGE', `${tokenFrom} is refused, ${problem}`, EXIT.usage);
  const modulePath = command.dataConverter ?? env.dataConverterPath;
  if (!modulePath)
    return fail(
      'USAGE',
      'codec-server needs --data-converter PATH (or SIDEEFFECT_DATA_CONVERTER): the module of your dataConverter',
      EXIT.usage,
    );
  let codecs: PayloadCodec[];
  try {
    codecs = (await loadDataConverter(modulePath, HELP['codec-server']!)).payloadCodecs ?? [];
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    return fail(error.code, error.message, EXIT.usage);
  }
  if (codecs.length === 0)
    return fail(
      'USAGE',
      `${modulePath}: its data converter has no payloadCodecs, so a codec server has nothing to encode or decode`,
      EXIT.usage,
    );
  let server: CodecServer;
  try {
    server = await startCodecServer({
      codecs,
      host: command.host,
      port: command.port,
      corsOrigins: command.corsOrigins,
      ...(token === undefined ? { insecureNoAuth: true } : { token }),
      ...(options.namespace ? { namespace: options.namespace } : {}),
      ...(command.maxConcurrent ? { maxConcurrent: command.maxConcurrent } : {}),
      ...(command.maxInFlightBytes ? { maxInFlightBytes: command.maxInFlightBytes } : {}),
      log: io.err,
    });
  } catch (error) {
    return fail(
      'UNAVAILABLE',
      `cannot listen on ${command.host}:${command.port}: ${(error as Error).message}`,
      EXIT.unavailable,
    );
  }
  const { url } = server;
  const print = printer(options.output, io.out);
  // The token itself is never printed: the lines say where to take it from.
  const secret =
    token === undefined
      ? undefined
      : command.tokenFile !== undefined
        ? `$(cat ${command.tokenFile})`
        : '$SIDEEFFECT_CODEC_TOKEN';
  const uiEndpoint = secret === undefined ? url : `${url}/${secret}`;
  print(
    [
      `codec server on ${url}: ${codecs.length} payload codec(s) from ${modulePath}`,
      `  POST ${url}/encode and ${url}/decode; browser origins allowed: ${command.corsOrigins.join(', ')}${options.namespace ? `; namespace ${options.namespace} only` : ''}`,
      token === undefined
        ? `  WARNING: --insecure-no-auth: every process on this machine can decrypt through it`
        : `  every request needs the token (${tokenFrom}): Authorization: Bearer <token>, or the URL ${url}/<token>`,
      'Point the Temporal UI at it, one of:',
      `  temporal server start-dev --ui-codec-endpoint "${uiEndpoint}"`,
      `  a UI server: TEMPORAL_CODEC_ENDPOINT="${uiEndpoint}" (or codec.endpoint in its config)`,
      `  this browser only: the UI's Codec Server icon (top bar) -> browser endpoint ${url}${secret === undefined ? '' : '/<token>'},`,
      '    "Use my browser setting and ignore Cluster-level setting"',
      `The temporal CLI: temporal workflow show --codec-endpoint ${url}${secret === undefined ? '' : ` --codec-auth "Bearer ${secret}"`} -w <workflow id>`,
      'Stop with Ctrl-C.',
    ].join('\n'),
    {
      url,
      codecs: codecs.length,
      corsOrigins: command.corsOrigins,
      auth: token === undefined ? 'none' : 'token',
      ...(options.namespace ? { namespace: options.namespace } : {}),
    },
  );
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  await server.close();
  return EXIT.ok;
}

/**
 * What pg can connect with: a postgres:// or postgresql:// URL, or a socket path. Anything else pg
 * reads as a host name ("not-a-url" became a DNS lookup of "base") and the CLI called it an outage.
 */
function isPostgresUrl(value: string): boolean {
  if (value.startsWith('/')) return true;
  try {
    return ['postgres:', 'postgresql:', 'socket:'].includes(new URL(value).protocol);
  } catch {
    return false;
  }
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

async function connectTemporal(settings: ClusterSettings): Promise<Connection | undefined> {
  try {
    return await Connection.connect({ ...settings.connectionOptions, connectTimeout: 3_000 });
  } catch {
    return undefined;
  }
}

/**
 * Temporal unreachable: a verdict still goes to the store (the ReconcileWorkflow reads it at its
 * next recheck), but the run exits 3 so a script knows the waiting workflow was not told.
 */
function unreachable(temporal: ClusterSettings): string {
  return `sideeffect: Temporal at ${temporal.connectionOptions.address} (namespace ${temporal.namespace}) does not answer; holding the verdict in the store for a worker's check (exit 3): once Temporal answers, a worker's sweeper prompts the key's ReconcileWorkflow within about a minute, which checks it and, accepted, tells the waiting workflow. Check --address, --namespace, --profile or TEMPORAL_ADDRESS`;
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

function jsonRecord(record: KeyRecord) {
  const { result, updatedAt, ...fields } = record;
  const rest = { ...fields, updatedAt: iso(updatedAt) };
  if (!result) return rest;
  try {
    return { ...rest, result: decodeJson(result) };
  } catch {
    return { ...rest, resultBytes: Buffer.from(result.payload).toString('base64') };
  }
}

/** A held verdict's result as JSON, or its bytes in base64 when they are not JSON. */
function jsonResult(result: Result): unknown {
  try {
    return decodeJson(result);
  } catch {
    return { resultBytes: Buffer.from(result.payload).toString('base64') };
  }
}

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
