/**
 * Connection strings reach error messages, logs and terminals (a demo saying where Postgres
 * did not answer, a Temporal SDK error echoing the address it was given); a password in them
 * ends up in CI logs and screenshots. Every message this library prints or throws that may
 * name a connection string goes through this.
 */

/** `scheme://user:password@` anywhere in the text. */
const URL_CREDENTIALS = /\b([a-z][a-z0-9+.-]*:\/\/[^\s:/@'"]*):([^\s@'"]*)@/gi;
/** `user:password@host` without a scheme, as gRPC-style addresses are written. */
const BARE_CREDENTIALS = /(^|[\s'"(=,])([^\s:/@'"(=,]+):([^\s:/@'"]+)@(?=[\w[])/g;
/** libpq keyword/value (`password=...`, quoted or not) and `?password=` URL parameters. */
const PASSWORD_PARAMETER = /\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]+)/gi;

/**
 * The text with the password of every connection string in it replaced by `***`; user, host,
 * port and database stay, so the message still says where.
 *
 * @example
 * ```ts
 * maskConnectionString('no answer at postgres://app:s3cret@db:5432/prod');
 * // 'no answer at postgres://app:***@db:5432/prod'
 * ```
 */
export function maskConnectionString(text: string): string {
  return text
    .replace(URL_CREDENTIALS, '$1:***@')
    .replace(BARE_CREDENTIALS, '$1$2:***@')
    .replace(PASSWORD_PARAMETER, '$1***');
}

/** Masks an error's message and stack in place (keeping its class, code and cause) and returns it. */
export function maskError<E>(error: E): E {
  if (error instanceof Error) {
    error.message = maskConnectionString(error.message);
    if (error.stack) error.stack = maskConnectionString(error.stack);
  }
  return error;
}
