import type { Command } from '../command.js';
import { commandHelp, mainHelp } from '../help.js';
import { breaker } from './breaker.js';
import { breakers } from './breakers.js';
import { codecServer } from './codec-server.js';
import { doctor } from './doctor.js';
import { list } from './list.js';
import { migrate } from './migrate.js';
import { purge } from './purge.js';
import { resolve } from './resolve/index.js';
import { show } from './show.js';
import { stats } from './stats.js';
import { withdraw } from './withdraw.js';

/** Every command, in the order `sideeffect help` lists them. A new command is one line here. */
export const COMMANDS: readonly Command[] = [
  migrate,
  list,
  show,
  resolve,
  withdraw,
  stats,
  breakers,
  breaker,
  purge,
  doctor,
  codecServer,
];

/** The command named `name`, or undefined. */
export function findCommand(name: string): Command | undefined {
  return COMMANDS.find((command) => command.name === name);
}

/** `sideeffect help [command]`: the usage of that command, or of the CLI as a whole. */
export function help(topic?: string): string {
  const command = topic === undefined ? undefined : findCommand(topic);
  return command ? commandHelp(command) : mainHelp(COMMANDS);
}
