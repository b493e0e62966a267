import type { Command, Context, GlobalOptions, Options } from './command.js';
import { COMMANDS, findCommand, help } from './commands/index.js';
import { GLOBAL_OPTIONS, globalOptions, VERSION_OPTION } from './global-options.js';
import { UsageError } from './usage.js';

/** What a command line asks for: a usage text, the version, or a command with checked params. */
export type Invocation =
  | { kind: 'help'; topic?: string }
  | { kind: 'version' }
  | {
      kind: 'command';
      command: Command;
      options: GlobalOptions;
      /** What the command's `parse` read: its checked params. */
      params: unknown;
      run(ctx: Context): Promise<number>;
    };

/**
 * Every option of every command and the global ones, by name: the line is read against all of
 * them at once, so global options may stand anywhere, before the command too. A name means the
 * same (type, short flag) in every command that takes it.
 */
const SPEC: Options = Object.assign(
  {},
  GLOBAL_OPTIONS,
  VERSION_OPTION,
  ...COMMANDS.map((command) => command.options),
);
const GLOBAL = Object.keys(GLOBAL_OPTIONS);
const NAMES = COMMANDS.map((command) => command.name).concat('help', 'version');

/**
 * Reads a command line: the command, its checked params and the global options. Refuses it with
 * a UsageError in our words (naming the closest option or command to a typo), with the usage of
 * the command it was meant for.
 */
export function parseInvocation(argv: string[], user = 'cli'): Invocation {
  const { values, positionals, unknown, problems } = tokenize(argv);
  const [first, ...rest] = positionals;
  if (unknown.length > 0) {
    // Options may precede the command, and an unknown one's value reads as a positional.
    const guess = positionals.map(findCommand).find((command) => command !== undefined);
    const known = guess ? [...GLOBAL, ...Object.keys(guess.options)] : Object.keys(SPEC);
    const option = unknown[0]!;
    const bare = option.replace(/^-+/, '').split('=')[0]!;
    throw new UsageError(
      `unknown option ${option}${didYouMean(bare, known, '--')}`,
      help(guess?.name),
      guess?.name,
    );
  }
  const name = first === 'help' ? undefined : first;
  const command = name === undefined ? undefined : findCommand(name);
  if (name !== undefined && !command && name !== 'version')
    throw new UsageError(`unknown command "${name}"${didYouMean(name, NAMES, '')}`, help());
  const usage = help(command?.name);
  if (problems.length > 0) throw new UsageError(problems[0]!, usage, command?.name);
  if (first === 'help') {
    // `sideeffect help resolve`: that command's usage.
    const [topic, ...extra] = rest;
    if (topic !== undefined && !findCommand(topic))
      throw new UsageError(`unknown command "${topic}"${didYouMean(topic, NAMES, '')}`, help());
    if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`, help());
    return topic === undefined ? { kind: 'help' } : { kind: 'help', topic };
  }
  if (values.help) return command ? { kind: 'help', topic: command.name } : { kind: 'help' };
  if (name === 'version' || (name === undefined && values.version)) return { kind: 'version' };
  if (!command) {
    const given = Object.keys(values);
    if (given.length === 0) return { kind: 'help' };
    throw new UsageError(`--${given[0]} needs a command: sideeffect <command> [options]`, usage);
  }
  const fail = (message: string): never => {
    throw new UsageError(message, usage, command.name);
  };
  const stray = Object.keys(values).find(
    (option) => !GLOBAL.includes(option) && !Object.hasOwn(command.options, option),
  );
  if (stray) fail(`${command.name} does not take --${stray}`);
  const options = globalOptions(values, fail);
  const own = Object.fromEntries(Object.entries(values).filter(([key]) => !GLOBAL.includes(key)));
  const prepared = command.prepare({
    values: own,
    positionals: rest,
    user,
    help: usage,
    topic: command.name,
  });
  return { kind: 'command', command, options, params: prepared.params, run: prepared.run };
}

/**
 * `; did you mean --fence?` for the closest known name: a typo (at most two edits, a swap of
 * neighbours counting one) or the start of a name (`--dry` for `--dry-run`); else nothing.
 */
function didYouMean(given: string, known: readonly string[], prefix: string): string {
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

const SHORT = new Map(
  Object.entries(SPEC).flatMap(([name, spec]) =>
    spec.short === undefined ? [] : [[spec.short, name] as const],
  ),
);

/**
 * Reads the whole line against {@link SPEC}: options anywhere, `--name value`, `--name=value`,
 * `-o json`, `-ojson`, `--` ending the options. Unknown options are collected, not thrown, so the
 * message can suggest a name the command takes. A value is never taken from a `--option` (a
 * forgotten value is reported as such) but may start with one dash (`--limit -1`, refused by the
 * option's own check).
 */
function tokenize(argv: string[]): {
  values: Record<string, string | boolean | string[]>;
  positionals: string[];
  unknown: string[];
  problems: string[];
} {
  const values: Record<string, string | boolean | string[]> = {};
  const positionals: string[] = [];
  const unknown: string[] = [];
  const problems: string[] = [];
  const set = (
    name: string,
    shown: string,
    inline: string | undefined,
    next: () => string | undefined,
  ) => {
    const spec = SPEC[name]!;
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
      else set(flag!, `--${flag}`, inline.length ? inline.join('=') : undefined, next);
    } else if (arg.startsWith('-') && arg.length > 1) {
      const name = SHORT.get(arg[1]!);
      if (name === undefined) unknown.push(arg.slice(0, 2));
      else if (SPEC[name]!.type === 'string')
        set(name, `-${arg[1]}`, arg.length > 2 ? arg.slice(2).replace(/^=/, '') : undefined, next);
      else if (arg.length > 2) unknown.push(arg);
      else set(name, arg, undefined, next);
    } else positionals.push(arg);
  }
  return { values, positionals, unknown, problems };
}
