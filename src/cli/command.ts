import type pg from 'pg';
import type { PgStore } from '../store/postgres/index.js';
import type { ClusterSettings } from '../worker/cluster.js';
import type { CliEnvironment } from './environment.js';
import type { Fail, Output, Print } from './output.js';
import { UsageError } from './usage.js';

/**
 * One option: how the command line is read for it, what `help` says about it and how its value is
 * checked. Declared once, beside the command that takes it, so adding an option is one entry.
 */
export interface OptionSpec {
  type: 'string' | 'boolean';
  /** A one-letter alias where the temporal CLI has one for the same meaning (`-n`, `-o`). */
  short?: string;
  /** May be given again; every value is kept, in order. */
  multiple?: boolean;
  /** The value's name in `help` (`--limit N`). */
  arg?: string;
  /** What `help <command>` prints for it. */
  description: string;
  /**
   * Checks a given value and converts it (a duration to milliseconds); a bad one is refused with
   * `check.fail`. Without it the value is the string as given.
   */
  parse?: (value: string, check: OptionCheck) => unknown;
}

/** What an option's `parse` gets besides the value: its name, and how to refuse it. */
export interface OptionCheck {
  name: string;
  fail(message: string): never;
}

/** A command's options by long name. */
export type Options = Readonly<Record<string, OptionSpec>>;

/** An option's value as its command reads it: what `parse` returns, a list for `multiple`. */
type ValueOf<S extends OptionSpec> = S['type'] extends 'boolean'
  ? boolean
  : S extends { parse: (...args: never) => infer T }
    ? S extends { multiple: true }
      ? T[]
      : T
    : S extends { multiple: true }
      ? string[]
      : string;

/** The options given, each checked; absent when not given. */
type Values<O extends Options> = { -readonly [K in keyof O]?: ValueOf<O[K]> };

/** The options every command takes: where the store and Temporal are, and how to print. */
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

/** A command's part of the command line, as its `parse` reads it. */
export interface Args<O extends Options> {
  values: Values<O>;
  positionals: readonly string[];
  /** `cli:<OS user>`: who a verdict is by unless `--by` says. */
  user: string;
  /** Refuses the command line, with the command's usage under the message (exit 2). */
  fail(message: string): never;
  /** The command's {@link CommandDefinition.argument}: refused unless given exactly once. */
  one(): string;
  /** Refuses any positional argument (a form of the command that takes none). */
  none(): void;
}

/** The store a command reads and writes, connected on first use. */
export interface Database {
  pool: pg.Pool;
  store: PgStore;
}

/**
 * What a command's `run` works with: its output (`print` to masked stdout), the environment,
 * the store and Temporal.
 */
export interface Context {
  options: GlobalOptions;
  env: CliEnvironment;
  /** stderr, every line masked (a pg error may echo a connection string). */
  err(line: string): void;
  /** stdout unmasked: for SQL this CLI generated, which holds no secret and must print as written. */
  verbatim(line: string): void;
  print: Print;
  fail: Fail;
  /** Asks the person at the terminal; absent when there is none, so asking refuses. */
  confirm: ((question: string) => Promise<boolean>) | undefined;
  /** The store's schema (`--schema`, `SIDEEFFECT_SCHEMA`), checked before the command runs. */
  schema: string;
  /** The store, through a pool opened on the first call (the connection string checked first). */
  database(): Database;
  /** Temporal's client settings; a broken configuration is a usage error, not an outage. */
  temporal(): ClusterSettings;
}

/**
 * Everything about one command, in one place: what `help` prints (summary, usage lines, text,
 * every option's description), how its arguments are checked (`parse`, which returns the params
 * or refuses with `args.fail`) and what it does (`run`, which returns the exit code).
 */
export interface CommandDefinition<O extends Options, P> {
  name: string;
  /** Its line in `sideeffect help`. */
  summary: string;
  /** The usage lines, each `sideeffect <name> ...`. */
  usage: readonly string[];
  /** What the command does, printed under the usage lines. */
  about: string;
  /**
   * The positional argument it takes (`show <key>`), read by `args.one()`. Without one, any
   * positional argument is refused before the options are checked.
   */
  argument?: Argument;
  options: O;
  /** Printed after the options: exit codes and what happens next. */
  notes?: string;
  /** `false`: the command never reads the store, so no schema is checked and no pool opened. */
  database?: false;
  parse(args: Args<O>): P;
  run(params: P, ctx: Context): Promise<number>;
}

/** A positional argument: its name in usage lines (`key` for `<key>`) and what `help` says of it. */
interface Argument {
  name: string;
  description: string;
}

/** A command as the registry holds it: its params' type hidden behind {@link Command.prepare}. */
export interface Command {
  readonly name: string;
  readonly summary: string;
  readonly usage: readonly string[];
  readonly about: string;
  readonly argument?: Argument;
  readonly options: Options;
  readonly notes?: string;
  readonly database?: false;
  /** Checks the command's arguments; the params it read, and the run that uses them. */
  prepare(line: CommandLine): Prepared;
}

/** The part of the command line that belongs to a command, as the parser read it. */
interface CommandLine {
  values: Readonly<Record<string, string | boolean | string[]>>;
  positionals: readonly string[];
  user: string;
  /** The command's usage text, carried by a refusal. */
  help: string;
  /** The command's name, for the `help` pointer under a refusal. */
  topic: string;
}

/** A checked command line: the params the command's `parse` returned, and its run on them. */
interface Prepared {
  params: unknown;
  run(ctx: Context): Promise<number>;
}

/** Registers a command: its definition, typed by its own options, erased to a {@link Command}. */
export function defineCommand<const O extends Options, P>(
  definition: CommandDefinition<O, P>,
): Command {
  const { parse, run, ...described } = definition;
  return {
    ...described,
    prepare(line) {
      const params = parse(commandArgs(definition, line));
      return { params, run: (ctx) => run(params, ctx) };
    },
  };
}

/** The command's arguments with every given option checked by its `parse`, in declaration order. */
function commandArgs<O extends Options>(
  { options, argument }: { options: O; argument?: Argument },
  line: CommandLine,
): Args<O> {
  const { positionals } = line;
  const fail = (message: string): never => {
    throw new UsageError(message, line.help, line.topic);
  };
  const none = () => {
    if (positionals.length > 0) fail(`unexpected argument "${positionals[0]}"`);
  };
  if (!argument) none();
  const values: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(options)) {
    const given = line.values[name];
    if (given === undefined) continue;
    const check = { name, fail };
    const read = (value: string) => (spec.parse ? spec.parse(value, check) : value);
    values[name] = Array.isArray(given)
      ? given.map(read)
      : typeof given === 'string'
        ? read(given)
        : given;
  }
  return {
    values: values as Values<O>,
    positionals,
    user: line.user,
    fail,
    one() {
      if (positionals.length !== 1 || !positionals[0])
        fail(`expected exactly one ${argument?.name ?? 'argument'}`);
      return positionals[0]!;
    },
    none,
  };
}
