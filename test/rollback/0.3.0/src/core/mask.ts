/**
 * Connection strings and credentials reach error messages, stored reasons, logs and terminals (a
 * demo saying where Postgres did not answer, a Temporal SDK error echoing the address it was
 * given, a driver error becoming the reason a key is uncertain, a failed child process echoing
 * its command line with `PGPASSWORD=...`); a password in them ends up in CI logs, dashboards and
 * screenshots. Every message this library stores, prints or throws that may name one goes through
 * this.
 */

/**
 * `scheme://user:password@host`: the password is everything up to the LAST `@` of the authority
 * (a raw `@`, `"` or `:` in a password is common in hand-written URLs), so none of it is left.
 */
const URL_CREDENTIALS =
  /\b([a-z][a-z0-9+.-]*:\/\/[^\s:/@'"]*):([^\s/]*)@(?=[^\s@/]*(?:[\s/?#]|$))/gi;
/**
 * `user:password@host:port` without a scheme, as gRPC-style addresses are written. Only before
 * a `host:port` (or `[ipv6]`): `temporal-cli:root@vm`, a Temporal identity, names a user on a host
 * and has no password in it.
 */
const BARE_CREDENTIALS = /(^|[\s'"(=,])([^\s:/@'"(=,]+):([^\s:/@'"]+)@(?=\[|[\w.-]+:\d)/g;
/**
 * Names under which a credential is written: any name ending in one of these words (`PGPASSWORD`,
 * `DB_PASSWORD`, `db.password`, `x-api-key`, `GITHUB_TOKEN`, `client_secret`, Azure SAS `sig`),
 * case-insensitive, and (ENV_KEY) any upper-case environment name ending in `_KEY`
 * (`AWS_SECRET_ACCESS_KEY`, `STRIPE_KEY`). A plain `key` is not one: it names an idempotency key
 * here.
 */
const SECRET_NAME =
  '(?:[A-Za-z0-9_.-]*(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|auth[_-]?key|credentials?|cookie)|sig|signature)';
/** Upper-case environment names ending in `_KEY`, matched case-sensitively. */
const ENV_KEY =
  /(?<![A-Za-z0-9_.-])([A-Z][A-Z0-9_]*_KEY=)("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s&'",;]+)/g;
const QUOTED = `"(?:[^"\\\\]|\\\\.)*"|'(?:[^'\\\\]|\\\\.)*'`;
/**
 * `name=value` (environment assignments, libpq keyword/value, logfmt, URL parameters) and
 * `name: value` (YAML, HTTP headers, an inspected object `{ password: 'x' }`, JSON members), the
 * name optionally quoted. A quoted value is masked whole, quotes kept; an unquoted one up to where
 * such a value ends (`&`, `;`, `,`, whitespace after `=`; the end of the line, `,`, `}` after `:`).
 */
const ASSIGNED = new RegExp(
  `(?<![A-Za-z0-9_.-])(["']?)(${SECRET_NAME})\\1(\\s*=\\s*)(${QUOTED}|[^\\s&'",;]+)`,
  'gi',
);
const COLON = new RegExp(
  `(?<![A-Za-z0-9_.-])(["']?)(${SECRET_NAME})\\1(\\s*:[ \\t]*)(${QUOTED}|[^\\s'",;}\\]][^\\r\\n,;}\\]]*)`,
  'gi',
);
/** The value of an `Authorization` header (or parameter) whatever its scheme, and a bearer token. */
const AUTHORIZATION =
  /\b((?:proxy-)?authorization["']?\s*[:=]\s*["']?)(?:(?:Basic|Bearer|Digest|Token|Negotiate)\s+)?[^\s'",;]+/gi;
const BEARER = /\b(Bearer)\s+[A-Za-z0-9._~+/=-]{16,}/g;
/** A JSON Web Token anywhere (its header always starts `{"`, base64url `eyJ`). */
const JWT = /\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*/g;
/** Formats that are secrets whatever they are called: cloud and forge tokens, private keys. */
const KNOWN_TOKENS =
  /\b(?:AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abposr]-[A-Za-z0-9-]{10,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|glpat-[A-Za-z0-9_-]{20,})\b/g;
const PRIVATE_KEY =
  /-----BEGIN ([A-Z ]*)PRIVATE KEY-----[\s\S]*?(?:-----END \1PRIVATE KEY-----|$)/g;

/** A masked value, keeping its quotes so the text around it still reads as it was written. */
function maskedValue(value: string): string {
  const quote = value[0];
  return quote === '"' || quote === "'" ? `${quote}***${quote}` : '***';
}

/**
 * The text with the password of every connection string in it replaced by `***`; user, host,
 * port and database stay, so the message still says where. Credentials written the usual other
 * ways are masked too (environment assignments such as `PGPASSWORD=` or `AWS_SECRET_ACCESS_KEY=`,
 * `token=`, logfmt, YAML, JSON or an inspected object's `password: '...'`, `x-api-key:` and
 * `Authorization:` headers, bearer tokens, JWTs, SAS `sig=`, private key blocks, well-known token
 * formats): an apply's error message becomes a stored reason, read later by people and
 * dashboards. A `user@host` is not a secret and stays.
 *
 * @example
 * ```ts
 * maskConnectionString('no answer at postgres://app:s3cret@db:5432/prod');
 * // 'no answer at postgres://app:***@db:5432/prod'
 * ```
 */
export function maskConnectionString(text: string): string {
  return text
    .replace(PRIVATE_KEY, '-----BEGIN $1PRIVATE KEY----- *** -----END $1PRIVATE KEY-----')
    .replace(URL_CREDENTIALS, '$1:***@')
    .replace(BARE_CREDENTIALS, '$1$2:***@')
    .replace(AUTHORIZATION, '$1***')
    .replace(BEARER, '$1 ***')
    .replace(ASSIGNED, (_, q: string, name: string, eq: string, value: string) =>
      value === '***' ? _ : `${q}${name}${q}${eq}${maskedValue(value)}`,
    )
    .replace(ENV_KEY, (_, name: string, value: string) =>
      value === '***' ? _ : `${name}${maskedValue(value)}`,
    )
    .replace(COLON, (_, q: string, name: string, colon: string, value: string) =>
      /^["']?\*\*\*["']?$/.test(value) ? _ : `${q}${name}${q}${colon}${maskedValue(value)}`,
    )
    .replace(JWT, '***')
    .replace(KNOWN_TOKENS, '***');
}

/** Masks an error's message and stack in place (keeping its class, code and cause) and returns it. */
export function maskError<E>(error: E): E {
  if (error instanceof Error) {
    error.message = maskConnectionString(error.message);
    if (error.stack) error.stack = maskConnectionString(error.stack);
  }
  return error;
}
