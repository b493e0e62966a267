import { NEXT_BY_CODE, type SideEffectErrorCode } from '../core/error-codes.js';
import { maskConnectionString } from '../core/mask.js';

/** How results are printed: `text` for people, `json` (one document) or `jsonl` (one object a line) for scripts. */
export type Output = 'text' | 'json' | 'jsonl';

export const OUTPUTS: readonly Output[] = ['text', 'json', 'jsonl'];

/** Where lines go: stdout and stderr, or a test's arrays. */
export interface Io {
  out: (line: string) => void;
  err: (line: string) => void;
}

/**
 * Every line masked: a pg or Temporal error may echo the connection string it was given, and a
 * stored reason may carry a credential from an apply's error.
 */
export function masked(io: Io): Io {
  return {
    out: (line) => io.out(maskConnectionString(line)),
    err: (line) => io.err(maskConnectionString(line)),
  };
}

/** Prints a result: the human text, or its JSON as `-o` says. */
export type Print = (human: string, json: unknown) => void;

/**
 * Text for people; `json` one indented document; `jsonl` one compact object a line (each item of
 * a list on its own line), for `jq` and log pipelines. Times in JSON are ISO-8601, as in text.
 */
export function printer(output: Output, out: (line: string) => void): Print {
  return (human, json) => {
    if (output === 'text') out(human);
    else if (output === 'json') out(JSON.stringify(json, null, 2));
    else for (const item of Array.isArray(json) ? json : [json]) out(JSON.stringify(item));
  };
}

/** Reports a failure on stderr (and as `{"error": {code, message}}` in JSON) and returns the exit code. */
export type Fail = (code: string, message: string, exit: number, details?: object) => number;

export function failer(output: Output, io: Io): Fail {
  return (code, message, exit, details = {}) => {
    io.err(`sideeffect: ${message}`);
    // A script switches on `next` as code does on `error.next`; the CLI's own codes have none.
    const next = Object.hasOwn(NEXT_BY_CODE, code)
      ? { next: NEXT_BY_CODE[code as SideEffectErrorCode] }
      : {};
    if (output !== 'text')
      io.out(
        JSON.stringify({
          error: { code, message: maskConnectionString(message), ...next, ...details },
        }),
      );
    return exit;
  };
}

/** `--json` or `-o json|jsonl` anywhere: a usage error is then answered in JSON too. */
export function wantsJson(argv: string[]): boolean {
  return argv.some(
    (arg, i) =>
      arg === '--json' ||
      /^(-o|--output)=?(json|jsonl)$/.test(arg) ||
      (['-o', '--output'].includes(argv[i - 1] ?? '') && /^jsonl?$/.test(arg)),
  );
}
