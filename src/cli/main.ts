import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { createInterface } from 'node:readline/promises';
import { Client, Connection, type DataConverter } from '@temporalio/client';
import pg from 'pg';
import { InvalidSchemaError, NotUncertainError, SideEffectError } from '../core/errors.js';
import { decodeJson } from '../core/json.js';
import { maskConnectionString } from '../core/mask.js';
import type { Store } from '../core/store.js';
import type { KeyRecord } from '../core/types.js';
import {
  grantsScript,
  migrate,
  migrationScript,
  PgStore,
  storeStats,
} from '../store/postgres/index.js';
import { quoteSchema } from '../store/postgres/sql.js';
import { type ClusterSettings, clusterSettings } from '../worker/cluster.js';
import { type Command, parseCommand } from './args.js';
import { loadDataConverter } from './data-converter.js';
import { printKey, printList, printStats } from './format.js';
import { resolveKey } from './resolve.js';
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
  databaseUrl: string;
  schema: string;
  /** Temporal's standard client configuration (profile file and TEMPORAL_* variables), read when a command needs Temporal. */
  temporal: () => ClusterSettings;
  /** Module of the app's data converter (`SIDEEFFECT_DATA_CONVERTER`); `--data-converter` wins. */
  dataConverterPath?: string;
}

export function environment(env: NodeJS.ProcessEnv = process.env): CliEnvironment {
  return {
    databaseUrl: env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres',
    schema: env.SIDEEFFECT_SCHEMA || 'sideeffect',
    temporal: () => clusterSettings({ env }),
    ...(env.SIDEEFFECT_DATA_CONVERTER ? { dataConverterPath: env.SIDEEFFECT_DATA_CONVERTER } : {}),
  };
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
  try {
    command = parseCommand(argv, safeUser());
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.err(`sideeffect: ${error.message}\n\n${error.help}`);
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
  try {
    quoteSchema(env.schema);
  } catch (error) {
    if (!(error instanceof InvalidSchemaError)) throw error;
    io.err(`sideeffect: SIDEEFFECT_SCHEMA: ${error.message}`);
    if (command.json) io.out(JSON.stringify({ error: { code: error.code, rule: error.rule } }));
    return EXIT.usage;
  }
  if (command.name === 'migrate' && command.printGrants) {
    output.out(grantsScript({ schema: env.schema, ...command.printGrants }));
    return EXIT.ok;
  }
  if (command.name === 'migrate' && command.printSql) {
    // SQL text, printed as written: no reason or connection string is in it.
    output.out(migrationScript({ schema: env.schema }));
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
      io.err(`sideeffect: ${error.message}`);
      return EXIT.usage;
    }
  }
  const pool = new pg.Pool({
    connectionString: env.databaseUrl,
    max: 2,
    connectionTimeoutMillis: 5_000,
  });
  pool.on('error', () => {});
  const store = new PgStore({ pool, schema: env.schema });
  const temporalClient = (connection: Connection, namespace: string) =>
    new Client({ connection, namespace, ...(dataConverter ? { dataConverter } : {}) });
  const print = (human: string, json: unknown) =>
    io.out(command.json ? JSON.stringify(json, null, 2) : human);
  try {
    return await run(command, {
      confirm: output.confirm,
      pool,
      store,
      env,
      print,
      io,
      temporalClient,
    });
  } catch (error) {
    const code = error instanceof SideEffectError ? error.code : 'UNAVAILABLE';
    io.err(`sideeffect: ${error instanceof Error ? error.message : String(error)}`);
    if (command.json)
      io.out(
        JSON.stringify({
          error: { code, message: maskConnectionString(String((error as Error).message)) },
        }),
      );
    return error instanceof SideEffectError && code !== 'STORE_UNAVAILABLE'
      ? EXIT.refused
      : EXIT.unavailable;
  } finally {
    await pool.end();
  }
}

interface Context {
  /** Asks the person at the terminal; absent when there is none. */
  confirm: ((question: string) => Promise<boolean>) | undefined;
  pool: pg.Pool;
  store: Store;
  env: CliEnvironment;
  print: (human: string, json: unknown) => void;
  io: { out: (line: string) => void; err: (line: string) => void };
  /** A Client through the app's data converter, when one was given. */
  temporalClient: (connection: Connection, namespace: string) => Client;
}

async function run(
  command: Exclude<Command, { name: 'help' | 'version' }>,
  ctx: Context,
): Promise<number> {
  const { store, print } = ctx;
  switch (command.name) {
    case 'migrate': {
      const applied = await migrate(ctx.pool, { schema: ctx.env.schema });
      print(
        applied.length
          ? `applied ${applied.join(', ')} to schema ${ctx.env.schema}`
          : `schema ${ctx.env.schema} is up to date`,
        { schema: ctx.env.schema, applied },
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
      if (!record) {
        ctx.io.err(`sideeffect: no key "${command.key}" in schema ${ctx.env.schema}`);
        if (command.json) ctx.io.out(JSON.stringify({ error: { code: 'NOT_FOUND' } }));
        return EXIT.refused;
      }
      const events = await store.events(command.key);
      print(printKey(record, events), { ...jsonRecord(record), events });
      return EXIT.ok;
    }
    case 'resolve': {
      const temporal = ctx.env.temporal();
      const connection = await connectTemporal(temporal);
      try {
        const client = connection && ctx.temporalClient(connection, temporal.namespace);
        if (!client)
          ctx.io.err(
            `sideeffect: Temporal at ${temporal.connectionOptions.address} does not answer; resolving in the store only`,
          );
        const { applied, reason, result, by, fence } = command;
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
        });
        // The JSON on stdout says it too; a person piping it should still see this.
        if (outcome.timedOut && command.json) ctx.io.err(`sideeffect: ${outcome.message}`);
        print(outcome.message, outcome);
        return outcome.won ? EXIT.ok : EXIT.refused;
      } catch (error) {
        if (!(error instanceof NotUncertainError)) throw error;
        ctx.io.err(`sideeffect: ${error.message}: nothing to resolve`);
        if (command.json)
          ctx.io.out(JSON.stringify({ error: { code: error.code, state: error.state } }));
        return EXIT.refused;
      } finally {
        await connection?.close();
      }
    }
    case 'resolve-batch':
      return resolveMany(command, ctx);
    case 'stats': {
      const stats = await storeStats(ctx.pool, { schema: ctx.env.schema });
      print(printStats(stats), stats);
      return EXIT.ok;
    }
    case 'purge': {
      if (!command.yes) {
        const question = `purge done keys older than ${command.olderThanMs / 1000} s from schema ${ctx.env.schema}? They are forgotten: a retry of one runs its effect again. [y/N] `;
        const confirm = ctx.confirm;
        if (!confirm) {
          ctx.io.err(
            'sideeffect: purge needs --yes when stdin or stdout is not a terminal (nobody to ask for confirmation)',
          );
          return EXIT.usage;
        }
        if (!(await confirm(question))) {
          ctx.io.err('sideeffect: purge not confirmed: nothing deleted');
          return EXIT.refused;
        }
      }
      const purged = await store.purge({ olderThanMs: command.olderThanMs, force: command.force });
      print(`purged ${purged} done key(s)`, { purged });
      return EXIT.ok;
    }
  }
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
      verdicts = await readVerdictFile(source.file, by);
    } catch (error) {
      if (!(error instanceof UsageError)) throw error;
      ctx.io.err(`sideeffect: ${error.message}`);
      if (command.json)
        ctx.io.out(JSON.stringify({ error: { code: error.code, message: error.message } }));
      return EXIT.usage;
    }
    selected = `${verdicts.length} verdict(s) from ${source.file}`;
  } else {
    const keys = await selectUncertain(ctx.store, source.selection, async () => {
      const { rows } = await ctx.pool.query<{ now: string }>(
        `select pg_catalog.floor(extract(epoch from pg_catalog.clock_timestamp()) operator(pg_catalog.*) 1000::numeric)::bigint as now`,
      );
      return Number(rows[0]!.now);
    });
    const { applied, reason } = source;
    verdicts = keys.map((key) =>
      applied ? { key, applied, result: null, reason, by } : { key, applied, reason, by },
    );
    selected = `${keys.length} uncertain key(s) on ${source.selection.resource}`;
  }
  const temporal = dryRun ? undefined : ctx.env.temporal();
  const connection = temporal && (await connectTemporal(temporal));
  try {
    const client = connection && ctx.temporalClient(connection, temporal!.namespace);
    if (temporal && !client)
      ctx.io.err(
        `sideeffect: Temporal at ${temporal.connectionOptions.address} does not answer; resolving in the store only`,
      );
    const report = await resolveBatch({ store: ctx.store, client, verdicts, dryRun });
    ctx.print(printBatch(report, selected), report);
    if (report.failed.length > 0) return EXIT.unavailable;
    if (report.alreadyDecided.length > 0 || report.refused.length > 0) return EXIT.refused;
    return EXIT.ok;
  } finally {
    await connection?.close();
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

function jsonRecord(record: KeyRecord) {
  const { result, ...rest } = record;
  if (!result) return rest;
  try {
    return { ...rest, result: decodeJson(result) };
  } catch {
    return { ...rest, resultBytes: Buffer.from(result.payload).toString('base64') };
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
