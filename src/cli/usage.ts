/**
 * Bad command-line input or configuration: exit code 2, nothing touched. Found while reading the
 * command line it carries that command's usage, printed under the message; found later (a
 * module that does not load, an unreadable file) it is reported alone.
 */
export class UsageError extends Error {
  readonly code = 'USAGE';
  constructor(
    message: string,
    readonly help = '',
    /** The command whose usage was wrong, for the `sideeffect help <command>` pointer. */
    readonly topic?: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }

  /**
   * What follows the reason on stderr: one line naming the help to read. The whole usage text
   * (50 lines for `resolve`) scrolled the reason off the screen.
   */
  get pointer(): string {
    return `see: sideeffect help${this.topic === undefined ? '' : ` ${this.topic}`}`;
  }
}

/** The exit codes scripts branch on: docs/operations.md lists them, so they never change meaning. */
export const EXIT = { ok: 0, refused: 1, usage: 2, unavailable: 3 } as const;
