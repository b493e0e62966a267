import { createHash } from 'node:crypto';
import pg from 'pg';
import { InvalidActionError, InvalidSchemaError } from '../../core/errors.js';
import { connectionConfig, unconfiguredConnection } from './connection.js';
import { boundCheckouts } from './session.js';

/** Where the store's tables and functions live when neither an option nor the environment says. */
const DEFAULT_SCHEMA = 'sideeffect';

/**
 * The schema when no `schema` option is given: `SIDEEFFECT_SCHEMA`, as the CLI reads it, else
 * `sideeffect`. Read by every store, sink and migration function alike, so one exported variable
 * never sends `sideeffect migrate` to one schema and a worker to another.
 */
export function defaultSchema(env: Record<string, string | undefined> = process.env): string {
  return env.SIDEEFFECT_SCHEMA || DEFAULT_SCHEMA;
}

/**
 * The schema name as a quoted identifier, checked first (InvalidSchemaError names the broken rule).
 * Any other character is allowed: the name only ever reaches SQL quoted, and nothing rewrites
 * statement text inside identifiers or literals.
 */
export function quoteSchema(schema: string): string {
  if (typeof schema !== 'string' || schema.length === 0) {
    throw new InvalidSchemaError(schema, 'empty', 'must be a non-empty string');
  }
  if (schema.includes('\0')) {
    throw new InvalidSchemaError(schema, 'nul', 'must not contain NUL bytes');
  }
  if (Buffer.byteLength(schema) > 63) {
    throw new InvalidSchemaError(
      schema,
      'too-long',
      'must be at most 63 bytes (a Postgres identifier)',
    );
  }
  if (schema.startsWith('pg_')) {
    throw new InvalidSchemaError(
      schema,
      'reserved',
      'names starting with pg_ are reserved for the system',
    );
  }
  return `"${schema.replaceAll('"', '""')}"`;
}

/**
 * A string as an SQL literal that stays one in every session a printed script may run in: with
 * `standard_conforming_strings` off a backslash escapes the quote after it, so a text with a
 * backslash is written as an escape string (`E'...'`, backslashes doubled).
 */
export function quoteLiteral(text: string): string {
  const quoted = text.replaceAll("'", "''");
  return text.includes('\\') ? `E'${quoted.replaceAll('\\', '\\\\')}'` : `'${quoted}'`;
}

/**
 * A name as it may appear in a printed script's `--` comment: JSON-quoted, so a newline (which
 * ends a line comment) or any other control character in it is written escaped and the rest of
 * the name stays inside the comment.
 */
export function commentName(name: string): string {
  return JSON.stringify(name).replaceAll('\u2028', '\\u2028').replaceAll('\u2029', '\\u2029');
}

/**
 * A dollar-quoting tag that does not occur in `body`: the body of a printed DO block, which holds
 * names, can then never end it.
 */
export function dollarTag(body: string): string {
  for (let i = 0; ; i += 1) {
    const tag = `$sideeffect${i === 0 ? '' : i}$`;
    if (!body.includes(tag)) return tag;
  }
}

/**
 * A statement, named (server-side prepared: parsed and planned once per connection, not per
 * call) unless the connections go through a transaction-mode pooler.
 */
export interface Statement {
  name?: string;
  text: string;
}

/**
 * Builds the schema's statements with names unique per schema: pg refuses one statement name
 * with two texts on a connection, and two stores on one pool may use different schemas. With
 * `named: false` they are sent unnamed: behind a transaction-mode pooler the next transaction may
 * run on a server connection that never prepared the name ("prepared statement does not exist").
 */
export function statements<K extends string>(
  schema: string,
  texts: Record<K, (qualified: string) => string>,
  { named = true }: { named?: boolean } = {},
): Record<K, Statement> {
  const qualified = quoteSchema(schema);
  const tag = createHash('sha256').update(schema).digest('hex').slice(0, 12);
  const built = {} as Record<K, Statement>;
  for (const name of Object.keys(texts) as K[]) {
    const text = texts[name](qualified);
    built[name] = named ? { name: `sideeffect_${name}_${tag}`, text } : { text };
  }
  return built;
}

/** How a store or sink gets its connections. */
export interface PoolOptions {
  /**
   * A pool to use; the caller keeps ownership (and should listen to its `error` event).
   * @default a pool of its own, from `connectionString`
   */
  pool?: pg.Pool;
  /**
   * Used when no pool is given.
   * @default process.env.DATABASE_URL, then libpq's PG* variables
   */
  connectionString?: string;
  /**
   * The connections go through a pooler in transaction mode (PgBouncer `pool_mode =
   * transaction`, as many managed Postgres offerings put in front of the database): statements
   * are sent unnamed, since consecutive transactions may run on different server connections.
   * Costs a parse per call.
   * @default false
   */
  transactionPooling?: boolean;
  /**
   * The longest a call waits for a connection of the pool before it throws StoreUnavailableError
   * (retryable, nothing sent): a pool whose connections the application holds, or a server that
   * stopped answering, fails calls instead of hanging them. No call of the store waits for a
   * second connection while it holds one, so the store's own calls always drain a full pool.
   * Set on a pool shared by a store and a sink, the last one made sets it for both.
   * @default 30_000
   */
  connectWaitMs?: number;
}

/**
 * The given pool, or a new one owned by the caller of this function. An owned pool gets an
 * `error` listener: without one, a connection dropped while idle (a Postgres restart) would crash
 * the process; the pool discards that connection on its own.
 */
export function openPool(options: PoolOptions): { pool: pg.Pool; owned: boolean } {
  const wait = options.connectWaitMs;
  if (wait !== undefined && (!Number.isSafeInteger(wait) || wait < 1 || wait > 2 ** 31 - 1)) {
    throw new InvalidActionError(
      'connectWaitMs',
      `must be a positive integer, got ${String(wait)}`,
    );
  }
  const config = options.pool
    ? undefined
    : connectionConfig({ connectionString: options.connectionString });
  const missing = config && unconfiguredConnection(config);
  const opened = options.pool
    ? { pool: options.pool, owned: false }
    : { pool: new pg.Pool(config), owned: true };
  // Refused at the first connection, not here: a module that builds a sink or a store and is
  // imported where it is never used (a test with the in-memory store) keeps working, and a use
  // says what is missing instead of asking Postgres for database "undefined".
  if (missing) opened.pool.connect = refusingConnect(missing);
  if (opened.owned) opened.pool.on('error', () => {});
  if (wait !== undefined) boundCheckouts(opened.pool, wait);
  return opened;
}

/** A pool's `connect`, in both its forms (pg-pool's `query` passes a callback), failing with `error`. */
function refusingConnect(error: Error): pg.Pool['connect'] {
  return ((callback?: (error: Error) => void) => {
    if (!callback) return Promise.reject(error);
    queueMicrotask(() => callback(error));
    return undefined;
  }) as pg.Pool['connect'];
}

/** pg returns int8 as a string (it may exceed 2^53); fences and epoch milliseconds never do. */
export function int(value: string | number | null): number {
  return Number(value);
}

/** A copy as a plain Uint8Array: pg's Buffers may be views into a shared slab. */
export function plainBytes(value: Uint8Array): Uint8Array {
  return new Uint8Array(value);
}

/** pg sends a Buffer parameter as binary (no hex round trip); a Uint8Array is wrapped, not copied. */
export function asBuffer(value: Uint8Array): Buffer {
  return Buffer.isBuffer(value) ? value : Buffer.from(value.buffer, value.byteOffset, value.length);
}
