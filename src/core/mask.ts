/**
 * Connection strings and credentials reach error messages, stored reasons, logs and terminals (a
 * demo saying where Postgres did not answer, a Temporal SDK error echoing the address it was
 * given, a driver error becoming the reason a key is uncertain); a password in them ends up in CI
 * logs, dashboards and screenshots. Every message this library stores, prints or throws that may
 * name one goes through this.
 */

/** `scheme://user:password@` anywhere in the text. */
const URL_CREDENTIALS = /\b([a-z][a-z0-9+.-]*:\/\/[^\s:/@'"]*):([^\s@'"]*)@/gi;
/** `user:password@host` without a scheme, as gRPC-style addresses are written. */
const BARE_CREDENTIALS = /(^|[\s'"(=,])([^\s:/@'"(=,]+):([^\s:/@'"]+)@(?=[\w[])/g;
/**
 * libpq keyword/value (`password=...`, quoted or not), `?password=` URL parameters, and the other
 * usual names of a credential written as `name=value` (`token=`, `api_key=`, `secret=`...).
 */
const PASSWORD_PARAMETER =
  /\b((?:password|passwd|pwd|secret|client_secret|token|access_token|refresh_token|api[_-]?key|access[_-]?key)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'",;]+)/gi;
/** The same names as JSON members: `"password": "..."`. */
const JSON_CREDENTIAL =
  /("(?:password|passwd|pwd|secret|client_secret|token|access_token|refresh_token|api[_-]?key|access[_-]?key)"\s*:\s*)"(?:[^"\\]|\\.)*"/gi;
/** A bearer token, and the value of an `Authorization` header whatever its scheme. */
const BEARER = /\b(Bearer)\s+[A-Za-z0-9._~+/=-]{16,}/g;
const AUTHORIZATION =
  /\b(authorization\s*[:=]\s*)(?:(?:Basic|Bearer|Digest|Token)\s+)?[^\s'",;]+/gi;

/**
 * The text with the password of every connection string in it replaced by `***`; user, host,
 * port and database stay, so the message still says where. Other credentials written the usual
 * ways (`token=...`, `"api_key": "..."`, `Bearer ...`) are masked too: an apply's error message
 * becomes a stored reason, read later by people and dashboards.
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
    .replace(PASSWORD_PARAMETER, '$1***')
    .replace(JSON_CREDENTIAL, '$1"***"')
    .replace(AUTHORIZATION, '$1***')
    .replace(BEARER, '$1 ***');
}

/** Masks an error's message and stack in place (keeping its class, code and cause) and returns it. */
export function maskError<E>(error: E): E {
  if (error instanceof Error) {
    error.message = maskConnectionString(error.message);
    if (error.stack) error.stack = maskConnectionString(error.stack);
  }
  return error;
}
