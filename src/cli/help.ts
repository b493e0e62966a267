import type { Command, OptionSpec, Options } from './command.js';
import { GLOBAL_OPTIONS, VERSION_OPTION } from './global-options.js';

/** Columns of the help text: what a terminal shows without wrapping, as the temporal CLI's. */
const WIDTH = 100;
/** Where descriptions start; a longer option label gets a line of its own. */
const COLUMN = 24;
const NBSP = '\u00a0';

/** `sideeffect help <command>`: usage lines, what it does, every option it takes, then its notes. */
export function commandHelp(command: Command): string {
  const indent = ' '.repeat(`Usage: sideeffect ${command.name} `.length);
  // A bracketed option stays on one line: `[-o json]` is not split in two.
  const usage = command.usage.map((line, i) =>
    wrap(
      `${i === 0 ? 'Usage: ' : '       '}${line}`.replace(/\[[^\]]*\]/g, (group) =>
        group.replaceAll(' ', NBSP),
      ),
      indent,
    ).replaceAll(NBSP, ' '),
  );
  return [
    usage.join('\n'),
    '',
    wrapLines(command.about),
    '',
    ...(command.argument
      ? ['Arguments:', column(`  <${command.argument.name}>`, command.argument.description), '']
      : []),
    'Options:',
    ...(Object.keys(command.options).length > 0 ? [optionList(command.options)] : []),
    '  and the options every command takes (sideeffect help)',
    ...(command.notes ? ['', wrapLines(command.notes)] : []),
  ].join('\n');
}

/** `sideeffect help`: every command's summary, then the options every command takes. */
export function mainHelp(commands: readonly Command[]): string {
  const width = Math.max(...commands.map((command) => command.name.length)) + 4;
  const list = commands.map((command) =>
    wrap(`  ${command.name.padEnd(width - 2)}${command.summary}`, ' '.repeat(width)),
  );
  return `sideeffect — inspect and resolve at-most-once side effects

Usage: sideeffect [options] <command> [options]
       sideeffect help <command>    (or sideeffect <command> --help): that command's usage

Commands:
${list.join('\n')}

Options everywhere (before or after the command):
${optionList({ ...GLOBAL_OPTIONS, ...VERSION_OPTION })}

SIDEEFFECT_DATA_CONVERTER (or --data-converter PATH on resolve and codec-server): a module
  exporting your dataConverter (e.g. an encryption codec), used for everything sent to and read
  from Temporal
Durations (purge, resolve --older-than): 30d, 12h, 1h30m, 45s, "2 days", "1 hour"

Exit codes: 0 done, 1 refused (e.g. already resolved, unknown key, a verdict for an earlier
attempt), 2 bad arguments, 3 store or Temporal unreachable (a resolve recorded in the store
while Temporal did not answer exits 3 too: the waiting workflow was not told)`;
}

/** How an option is written in help: `-n, --namespace NS`. */
export function optionLabel(name: string, spec: OptionSpec): string {
  return `${spec.short ? `-${spec.short}, ` : ''}--${name}${spec.arg ? ` ${spec.arg}` : ''}`;
}

function optionList(options: Options): string {
  return Object.entries(options)
    .map(([name, spec]) => column(`  ${optionLabel(name, spec)}`, spec.description))
    .join('\n');
}

/** A label and its description from {@link COLUMN} on, under the label when it is too long. */
function column(label: string, description: string): string {
  const indent = ' '.repeat(COLUMN);
  return label.length < COLUMN - 1
    ? wrap(label.padEnd(COLUMN) + description, indent)
    : `${label}\n${wrap(indent + description, indent)}`;
}

/** Each line of `text` wrapped on its own, continued under its own indentation. */
function wrapLines(text: string): string {
  return text
    .split('\n')
    .map((line) => wrap(line, line.match(/^ */)![0]))
    .join('\n');
}

/** Breaks `line` at spaces to fit {@link WIDTH}; continuation lines start with `indent`. */
function wrap(line: string, indent: string): string {
  const lines: string[] = [];
  let current = line;
  while (current.length > WIDTH) {
    const at = current.lastIndexOf(' ', WIDTH);
    if (at <= indent.length) break;
    lines.push(current.slice(0, at).trimEnd());
    current = indent + current.slice(at + 1).trimStart();
  }
  lines.push(current);
  return lines.join('\n');
}
