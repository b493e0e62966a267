import type pg from 'pg';
import {
  FenceExhaustedError,
  StoreMisconfiguredError,
  StoreUnavailableError,
} from '../../core/errors.js';

/** A client checked out of a pool, whose connection errors are heard from the moment it is ours. */
export interface Session {
  client: pg.PoolClient;
  /** The connection error reported on the client itself (not on a query), if one came. */
  readonly lost: unknown;
  /** Gives the client back to the pool; a lost connection, or `broken`, discards it instead. */
  release(broken?: boolean): void;
}

/**
 * Checks a client out with an `error` listener attached inside pg-pool's own callback, in the
 * same tick as the hand-over. pg-pool removes its idle listener at that moment, and a FATAL that
 * arrives in the same socket chunk as the ReadyForQuery (a backend terminated, a restart, a
 * failover) is emitted before any `await pool.connect()` continuation runs: unheard, Node throws
 * "Unhandled 'error' event" and the whole worker exits.
 */
function checkout(pool: pg.Pool): Promise<Session> {
  return new Promise((resolve, reject) => {
    connectWithin(pool, (error, client, done) => {
      if (error || !client) reject(error ?? new Error('pool handed out no client'));
      else resolve(sessionOf(client, done!));
    });
  });
}

/** How long a store call waits for a pool connection by default ({@link boundCheckouts}). */
const DEFAULT_CONNECT_WAIT_MS = 30_000;

const checkoutBounds = new WeakMap<pg.Pool, number>();

/**
 * Bounds every wait of the store's calls for a connection of `pool`: a call that waits longer
 * throws StoreUnavailableError (retryable) instead of waiting for ever behind a pool that no
 * call gives back. No call of the store waits for a connection while it holds one
 * (docs/architecture.md), so a full pool drains; this bound is what answers when it does not
 * (connections held by the application, a server that stopped answering).
 */
export function boundCheckouts(pool: pg.Pool, ms: number): void {
  checkoutBounds.set(pool, ms);
}

/** A pool connection that did not come within the bound: the wait given up, nothing sent. */
class CheckoutTimeout extends Error {}

/**
 * pool.connect(), given up after the pool's bound ({@link boundCheckouts}): the callback then
 * gets a CheckoutTimeout, and the connection pg-pool hands over later goes straight back.
 */
function connectWithin(
  pool: pg.Pool,
  callback: (
    error: Error | undefined,
    client?: pg.PoolClient,
    done?: (release?: unknown) => void,
  ) => void,
): void {
  const ms = checkoutBounds.get(pool) ?? DEFAULT_CONNECT_WAIT_MS;
  let waiting = true;
  const timer = setTimeout(() => {
    waiting = false;
    callback(
      new CheckoutTimeout(
        `no connection of the pool within ${ms} ms (${pool.totalCount} open, ${pool.waitingCount} callers waiting)`,
      ),
    );
  }, ms);
  pool.connect((error, client, done) => {
    if (!waiting) {
      if (client) done();
      return;
    }
    waiting = false;
    clearTimeout(timer);
    callback(error, client, done);
  });
}

/** The client pg-pool just handed over, listened to from this moment on. */
function sessionOf(client: pg.PoolClient, done: (release?: unknown) => void): Session {
  let lost: unknown;
  const onError = (cause: unknown): void => {
    lost ??= cause;
  };
  client.on('error', onError);
  return {
    client,
    get lost() {
      return lost;
    },
    release(broken = false) {
      done(lost ?? (broken ? new Error('connection discarded after a failure') : undefined));
      client.off('error', onError);
    },
  };
}

/** {@link checkout} for one store operation: a pool that cannot hand out a connection is StoreUnavailableError. */
export async function checkoutFor(pool: pg.Pool, operation: string): Promise<Session> {
  try {
    return await checkout(pool);
  } catch (error) {
    throw storeError(operation, error);
  }
}

/**
 * One statement on a pooled connection, at READ COMMITTED ({@link queryAtReadCommitted}), in the
 * fewest steps: every store operation but a few is exactly this, and on the replay path the
 * nested async steps of a checkout, a session and a query measured as much Node time as the
 * query itself. The connection's error listener is attached in the checkout's own callback, as in
 * {@link checkout}. A failure is StoreUnavailableError with the cause, and the connection is
 * discarded, except after a unique violation (`23505`, a race the caller answers by asking
 * again) or a lock wait given up (`55P03`, answered as contended): those leave the connection as
 * fit as it was.
 */
export function runStatement<R extends pg.QueryResultRow>(
  pool: pg.Pool,
  operation: string,
  statement: { name?: string; text: string },
  values: unknown[],
): Promise<R[]> {
  return new Promise((resolve, reject) => {
    connectWithin(pool, (error, client, done) => {
      if (error || !client) {
        reject(storeError(operation, error ?? new Error('pool handed out no client')));
        return;
      }
      const session = sessionOf(client, done!);
      const finish = (failure: unknown, rows?: R[]): void => {
        session.release(
          Boolean(failure) && !isUniqueViolation(failure) && !isLockNotAvailable(failure),
        );
        if (failure) reject(storeError(operation, failure));
        else resolve(rows!);
      };
      queryAtReadCommitted<R>(client, statement, values).then(
        (rows) => finish(undefined, rows),
        (failure: unknown) => finish(failure),
      );
    });
  });
}

/** Runs one of a part of the store's statements by its name, as {@link runStatement} runs it. */
export type StatementRunner<K extends string> = <R extends pg.QueryResultRow>(
  operation: K,
  values: unknown[],
) => Promise<R[]>;

/** The runner of `sql`, statements built by `statements()` for one part of the store. */
export function statementRunner<K extends string>(
  pool: pg.Pool,
  sql: Record<K, { name?: string; text: string }>,
): StatementRunner<K> {
  return <R extends pg.QueryResultRow>(operation: K, values: unknown[]) =>
    runStatement<R>(pool, operation, sql[operation], values);
}

/** A statement gave up waiting for a row another transaction holds (lockWaitMs): contended. */
export function lockWaitExceeded(error: unknown): boolean {
  return error instanceof StoreUnavailableError && isLockNotAvailable(error.cause);
}

/** A statement stopped waiting for a lock at its `lock_timeout` (SQLSTATE 55P03); the connection is fine. */
export function isLockNotAvailable(error: unknown): boolean {
  return (error as { code?: unknown } | undefined)?.code === '55P03';
}

/** Postgres refused a row because its key exists (SQLSTATE 23505). */
export function isUniqueViolation(error: unknown): boolean {
  return (error as { code?: unknown } | undefined)?.code === '23505';
}

/** Whether each connection's default isolation is READ COMMITTED, asked once per connection. */
const readCommittedByDefault = new WeakMap<pg.ClientBase, boolean>();

/**
 * Runs one statement at READ COMMITTED whatever the database's or role's default: the store's
 * functions decide under row locks, and at REPEATABLE READ or SERIALIZABLE ordinary contention
 * becomes serialization failures that read as an outage. On a connection whose default already is
 * READ COMMITTED (the usual case) the statement runs as it is. On any other it runs inside
 * `begin isolation level read committed` ... `commit`, sent as ONE simple query with the values
 * inlined as literals: still one round trip, and the connection's session is left as it was (a
 * pool passed in by the caller keeps its own default). The default is asked once per connection;
 * behind a transaction-mode pooler every server connection shares the role's and database's.
 */
function queryAtReadCommitted<R extends pg.QueryResultRow>(
  client: pg.ClientBase,
  statement: { name?: string; text: string },
  values: unknown[],
): Promise<R[]> {
  switch (readCommittedByDefault.get(client)) {
    case true:
      // The usual case, with no async step of its own: on the replay path each one measured.
      return client.query<R>({ ...statement, values }).then((result) => result.rows);
    case false:
      return queryInReadCommitted<R>(client, statement, values);
    default:
      return learnDefault(client).then(() => queryAtReadCommitted<R>(client, statement, values));
  }
}

/**
 * Asks a connection, once, whether its default isolation is READ COMMITTED. A microtask first:
 * pg-pool hands a new connection over before the client has sent what the pool's `connect`
 * listeners queued on it (its owner's `SET`s), and a query queued behind one still waiting is
 * what pg 8 deprecates and pg 9 refuses. A moment later that one is running, and ours waits
 * behind it as any statement behind a running one does.
 */
async function learnDefault(client: pg.ClientBase): Promise<void> {
  await Promise.resolve();
  const { rows } = await client.query<{ plain: boolean }>(
    `select pg_catalog.current_setting('default_transaction_isolation') = 'read committed' as plain`,
  );
  readCommittedByDefault.set(client, rows[0]!.plain);
}

/** The statement inside its own READ COMMITTED transaction, in one simple query. */
async function queryInReadCommitted<R extends pg.QueryResultRow>(
  client: pg.ClientBase,
  statement: { text: string },
  values: unknown[],
): Promise<R[]> {
  const inlined = inlineParameters(statement.text, (n) => literal(client, values[n - 1]));
  let results: pg.QueryResult<R>[];
  try {
    results = (await client.query(
      `begin isolation level read committed; ${inlined}; commit`,
    )) as unknown as pg.QueryResult<R>[];
  } catch (error) {
    // A failed statement leaves that transaction open and aborted; the caller may go on using
    // the connection (a unique violation it answers by asking again).
    await client.query('rollback').catch(() => {});
    throw error;
  }
  return results[1]!.rows;
}

/** A parameter as an SQL literal, for the statement types the store sends. */
function literal(client: pg.ClientBase, value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'boolean') return String(value);
  if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value);
  if (typeof value === 'string') return client.escapeLiteral(value);
  // The batched statements' arrays (each cast to its type in the statement text).
  if (Array.isArray(value)) return `ARRAY[${value.map((v) => literal(client, v)).join(', ')}]`;
  if (value instanceof Uint8Array) {
    const hex = Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex');
    return `pg_catalog.decode('${hex}', 'hex')`;
  }
  throw new TypeError(`no SQL literal for a ${typeof value} parameter`);
}

/**
 * `text` with each parameter `$n` replaced by `value(n)`, and nothing else touched: a `$1` inside
 * a quoted identifier (a schema named `a$1`), a string literal, a dollar-quoted string or a
 * comment is text, not a parameter. Rewriting those spliced the caller's values into the SQL
 * outside any literal.
 */
function inlineParameters(text: string, value: (n: number) => string): string {
  // Quoted identifiers, string literals (E'' with backslash escapes, or plain with '' doubled),
  // dollar quotes, comments, then a parameter: the first alternative to match at a position wins.
  const token =
    /"(?:[^"]|"")*"|[eE]'(?:[^'\\]|\\.|'')*'|'(?:[^']|'')*'|(\$(?:[A-Za-z_]\w*)?\$)[\s\S]*?\1|--[^\n]*|\/\*[\s\S]*?\*\/|(?<![\w$])\$(\d+)/g;
  return text.replace(token, (match, _tag: string | undefined, n: string | undefined) =>
    n === undefined ? match : value(Number(n)),
  );
}

/** Migration 0022's refusal of a fence past 2^53 - 1. */
const FENCE_EXHAUSTED = 'SE141';

/** Postgres's answers for a missing relation, schema or function: the schema is not (fully) migrated. */
const MISSING_OBJECT = new Set(['42P01', '3F000', '42883']);

/**
 * The error a failed store operation throws: StoreMisconfiguredError when Postgres says a table,
 * schema or function of the store does not exist (a retry cannot help: migrate),
 * FenceExhaustedError for a grant past the largest exact fence, else StoreUnavailableError.
 */
export function storeError(
  operation: string,
  cause: unknown,
): StoreUnavailableError | StoreMisconfiguredError | FenceExhaustedError {
  // A pool that names no database refuses its connections with this (openPool): not an outage.
  if (cause instanceof StoreMisconfiguredError) return cause;
  const code = (cause as { code?: unknown } | undefined)?.code;
  if (code === FENCE_EXHAUSTED) return new FenceExhaustedError(operation, cause);
  if (typeof code !== 'string' || !MISSING_OBJECT.has(code))
    return new StoreUnavailableError(operation, cause);
  const message = cause instanceof Error ? cause.message : String(cause);
  const schema =
    /(?:relation|function) "?([^".\s(]+)"?\./.exec(message)?.[1] ??
    /schema "([^"]+)" does not exist/.exec(message)?.[1];
  return new StoreMisconfiguredError(
    schema,
    `store ${operation} failed: ${message} (the schema is not migrated, or not the one migrated)`,
    cause,
  );
}
