import { AsyncLocalStorage } from 'node:async_hooks';
import pg from 'pg';
import { TransactionEndedError, TransactionMisuseError } from '../../core/errors.js';

/**
 * What keeps a transactional effect's work inside the store's transaction, and the connection it
 * ran on as it was before: the work gets a client that refuses to end the transaction, a
 * FencedSink refuses to write from inside it, a watchdog ends it at its TTL whatever the work set,
 * and the session is put back (or the connection discarded, or under a transaction-mode pooler
 * the effect refused) before the connection goes anywhere else.
 */

/** The key of the transactional work running in this async context, if any. */
const transactionalWork = new AsyncLocalStorage<string>();

/** Runs `work` marked as a transactional effect's work for `key` (see {@link refuseInsideTransactionalWork}). */
export function runAsTransactionalWork<T>(key: string, work: () => Promise<T>): Promise<T> {
  return transactionalWork.run(key, work);
}

/**
 * Refuses a FencedSink operation from inside a transactional effect's work: the sink writes on
 * another connection, whose raise of the resource's mark waits for the row this transaction
 * locked at its grant, so it would wait until the TTL ended the holder, then land on its own.
 */
export function refuseInsideTransactionalWork(operation: string): void {
  const key = transactionalWork.getStore();
  if (key === undefined) return;
  throw new TransactionMisuseError(
    key,
    'fenced-sink',
    `${operation} of a FencedSink inside transactional work: write on the transaction's own client (context.tx); the sink's separate transaction would wait on this one's lock`,
  );
}

/**
 * Whether SQL text holds a statement that ends or prepares the current transaction (COMMIT,
 * END, ABORT, ROLLBACK but not ROLLBACK TO a savepoint, PREPARE TRANSACTION). Only a top-level
 * statement can: a procedure or DO block inside a transaction block may not. Strings, quoted
 * identifiers, dollar quotes and comments are skipped, so `select 'commit'` is not one. The text
 * is read as Postgres's lexer reads it, and in both ways a plain string may be read (with
 * `standard_conforming_strings` on, and off, which the work may set): a statement either reading
 * finds is one. A COMMIT that got through anyway is refused by the database (migration 0017); a
 * ROLLBACK can be refused only here.
 */
export function endsTransaction(text: string): boolean {
  return [false, true].some((backslashes) =>
    statementsOf(text, backslashes).some((statement) =>
      /^\s*(?:commit|end|abort|rollback(?!\s+(?:work\s+|transaction\s+)?to\b)|prepare\s+transaction)\b/i.test(
        statement,
      ),
    ),
  );
}

/** A character that may start an identifier or a dollar quote's tag. */
const IDENTIFIER_START = /[A-Za-z_\u0080-\uffff]/;
/** A character that may continue an identifier (a dollar sign too: `x$a$` is one identifier). */
const IDENTIFIER_PART = /[A-Za-z0-9_$\u0080-\uffff]/;
/** A character that may continue a dollar quote's tag. */
const TAG_PART = /[A-Za-z0-9_\u0080-\uffff]/;

/**
 * The statements of SQL text, each with its strings, quoted identifiers, dollar quotes and
 * comments replaced by a word no keyword matches (a comment by a space), as Postgres's lexer
 * splits them: an identifier is read whole (a `$` inside it starts no dollar quote), block
 * comments nest, and `backslashes` says whether a backslash escapes in a plain string.
 */
function statementsOf(text: string, backslashes: boolean): string[] {
  const statements: string[] = [];
  let current = '';
  let i = 0;
  const n = text.length;
  /** The index after a quoted run opened at `from` by `quote`, `escapes` saying whether backslash escapes. */
  const closing = (from: number, quote: string, escapes: boolean): number => {
    let j = from + 1;
    while (j < n) {
      const c = text[j]!;
      if (escapes && c === '\\') j += 2;
      else if (c === quote) {
        if (text[j + 1] === quote) j += 2;
        else return j + 1;
      } else j += 1;
    }
    return n;
  };
  while (i < n) {
    const c = text[i]!;
    const next = text[i + 1];
    if (c === ';') {
      statements.push(current);
      current = '';
      i += 1;
    } else if (c === '-' && next === '-') {
      const end = text.indexOf('\n', i);
      i = end === -1 ? n : end;
      current += ' ';
    } else if (c === '/' && next === '*') {
      let depth = 1;
      i += 2;
      while (i < n && depth > 0) {
        if (text[i] === '/' && text[i + 1] === '*') {
          depth += 1;
          i += 2;
        } else if (text[i] === '*' && text[i + 1] === '/') {
          depth -= 1;
          i += 2;
        } else i += 1;
      }
      current += ' ';
    } else if ((c === 'e' || c === 'E') && next === "'") {
      i = closing(i + 1, "'", true);
      current += ' x ';
    } else if (c === "'") {
      i = closing(i, "'", backslashes);
      current += ' x ';
    } else if (c === '"') {
      i = closing(i, '"', false);
      current += ' x ';
    } else if (c === '$' && (next === '$' || (next !== undefined && IDENTIFIER_START.test(next)))) {
      let j = i + 1;
      while (j < n && TAG_PART.test(text[j]!)) j += 1;
      if (text[j] === '$') {
        const tag = text.slice(i, j + 1);
        const end = text.indexOf(tag, j + 1);
        i = end === -1 ? n : end + tag.length;
        current += ' x ';
      } else {
        current += text.slice(i, j);
        i = j;
      }
    } else if (IDENTIFIER_START.test(c)) {
      let j = i + 1;
      while (j < n && IDENTIFIER_PART.test(text[j]!)) j += 1;
      current += text.slice(i, j);
      i = j;
    } else {
      current += c;
      i += 1;
    }
  }
  statements.push(current);
  return statements;
}

/**
 * Whether SQL text may create or drop an SQL prepared statement (PREPARE, DEALLOCATE, DISCARD),
 * read anywhere in it, strings included, so that dynamic SQL in a DO block counts too. What the
 * session check counts only then: counting reads every prepared statement of the connection.
 */
function mayPrepare(text: string): boolean {
  return /\b(?:prepare|deallocate|discard)\b/i.test(text);
}

/**
 * The work's view of the transaction's client: the same client, except that a statement ending
 * the transaction (see {@link endsTransaction}) is never sent, and `release` is refused (the
 * store gives the client back). Sent, a ROLLBACK would free the resource's row at once: a caller
 * waiting for it would be granted the fence this work still holds and writes with.
 * Nor is any statement once the server reports no transaction open (a COMMIT sent around this
 * client, refused by the commit check, rolled everything back): it would commit on its own, and
 * the attempt, failed, would be retried and applied again. A statement asked for while another is
 * in flight waits for the server's answer to it (pg rejects a failed statement before that
 * answer says whether a transaction is still open).
 * `refused` is called each time, so the store rolls back whatever the work does next, and
 * `preparing` when a statement may change the session's prepared statements ({@link mayPrepare};
 * a statement whose text the client cannot read counts as one).
 */
export function guardedClient(
  client: pg.PoolClient,
  key: string,
  refused: (error: TransactionEndedError) => void,
  preparing: () => void,
): pg.PoolClient {
  const refuse = (why: string): TransactionEndedError => {
    const error = new TransactionEndedError(key, { cause: new Error(why) });
    refused(error);
    return error;
  };
  const status = transactionStatus(client);
  /** The refusal as the caller asked for the answer: its callback, its submittable, or a promise. */
  const answer = (args: unknown[], error: TransactionEndedError): unknown => {
    const [first] = args;
    const callback = args.find((arg, i) => i > 0 && typeof arg === 'function');
    if (callback) {
      queueMicrotask(() => (callback as (error: Error) => void)(error));
      return undefined;
    }
    if (typeof (first as { submit?: unknown } | null | undefined)?.submit === 'function') {
      const submittable = first as { handleError?: (error: Error) => void };
      queueMicrotask(() => submittable.handleError?.(error));
      return first;
    }
    return Promise.reject(error);
  };
  const send = (args: unknown[]): unknown => {
    if (status.ended())
      return answer(args, refuse('the transaction had ended (a COMMIT sent around the client)'));
    return (client.query as (...a: unknown[]) => unknown).apply(client, args);
  };
  const query = (...args: unknown[]): unknown => {
    const [first] = args;
    const text =
      typeof first === 'string' ? first : (first as { text?: unknown } | null | undefined)?.text;
    if (typeof text !== 'string' || mayPrepare(text)) preparing();
    if (typeof text === 'string' && endsTransaction(text))
      return answer(args, refuse('the work sent a statement that ends the transaction'));
    if (status.idle()) return send(args);
    // Sent once the statement in flight is answered; in the caller's order.
    const [, second, third] = args;
    const callback = [second, third].find((arg) => typeof arg === 'function');
    if (callback || typeof (first as { submit?: unknown } | null)?.submit === 'function') {
      status.whenIdle(() => send(args));
      return callback ? undefined : first;
    }
    return new Promise((resolve, reject) => {
      status.whenIdle(() => (send(args) as Promise<unknown>).then(resolve, reject));
    });
  };
  return new Proxy(client, {
    get(target, property) {
      if (property === 'query') return query;
      if (property === 'release')
        return () => {
          throw refuse('the work released the transaction client');
        };
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** What {@link guardedClient} knows of its connection's transaction, from the server's own reports. */
interface TransactionStatus {
  /** No statement of this client is in flight nor waits to be sent: the last status reported is current. */
  idle(): boolean;
  /** The server last reported no transaction open (ReadyForQuery 'I'). */
  ended(): boolean;
  /** Calls `send` once every statement before it is answered (or the connection is gone), in order. */
  whenIdle(send: () => void): void;
  /** Resolves once no statement waits to be sent. */
  sent(): Promise<void>;
}

const statuses = new WeakMap<pg.ClientBase, TransactionStatus>();

/**
 * The transaction status of a client's connection, kept from each ReadyForQuery the server sends
 * (one listener per connection, for its life; unknown before the first is seen, which a guarded
 * client never needs: it is made inside the transaction).
 */
function transactionStatus(client: pg.ClientBase): TransactionStatus {
  const known = statuses.get(client);
  if (known) return known;
  const internals = client as unknown as {
    connection: {
      prependListener(
        event: 'readyForQuery',
        listener: (message: { status?: string }) => void,
      ): void;
    };
    readyForQuery: boolean;
  };
  let last: string | undefined;
  // Before the client's own listener, which sends the next statement queued behind it.
  internals.connection.prependListener('readyForQuery', (message) => {
    last = message.status;
  });
  const waiting: (() => void)[] = [];
  const emptied: (() => void)[] = [];
  let gone = false;
  const next = () => {
    // One at a time: each is sent once the one before it is answered.
    while (waiting.length > 0 && (internals.readyForQuery || gone)) waiting.shift()!();
    if (waiting.length > 0) return;
    client.off('drain', next);
    client.off('end', lost);
    client.off('error', lost);
    for (const resolve of emptied.splice(0)) resolve();
  };
  const lost = () => {
    gone = true;
    next();
  };
  const status: TransactionStatus = {
    idle: () => internals.readyForQuery && waiting.length === 0,
    ended: () => last === 'I',
    whenIdle: (send) => {
      if (waiting.push(send) > 1) return;
      client.on('drain', next);
      client.on('end', lost);
      client.on('error', lost);
    },
    sent: () =>
      waiting.length === 0
        ? Promise.resolve()
        : new Promise((resolve) => {
            emptied.push(resolve);
          }),
  };
  statuses.set(client, status);
  return status;
}

/**
 * Resolves once every statement the work asked for on its guarded client has been sent (or
 * refused): the store's own statements after the work must queue behind them, as they did when
 * each was sent at once.
 */
export function guardedStatementsSent(client: pg.ClientBase): Promise<void> {
  return statuses.get(client)?.sent() ?? Promise.resolve();
}

/**
 * The session-level settings a connection came out of the pool with (its owner's SETs at connect,
 * its role), as JSON: what the store puts back after RESET ALL. Asked once per connection (the
 * whole of pg_settings costs milliseconds); behind a transaction-mode pooler no session state is
 * anyone's, and the server's defaults are put back.
 */
export const SESSION_BASELINE = `pg_catalog.jsonb_build_object(
    'settings', coalesce((select pg_catalog.jsonb_object_agg(name, setting) from pg_catalog.pg_settings
      where source operator(pg_catalog.=) 'session'
        and name operator(pg_catalog.<>) all (array['transaction_isolation', 'transaction_read_only', 'transaction_deferrable'])),
      '{}'::jsonb),
    'role', case when current_user operator(pg_catalog.<>) session_user then current_user::text end)::text`;

/** What {@link SESSION_BASELINE} answers. */
export interface SessionBaseline {
  settings: Record<string, string>;
  role: string | null;
}

const baselines = new WeakMap<pg.ClientBase, SessionBaseline>();

/** The baseline known for this client, if asked already. */
export function knownBaseline(client: pg.ClientBase): SessionBaseline | undefined {
  return baselines.get(client);
}

/** Remembers a client's baseline (the JSON {@link SESSION_BASELINE} answered). */
export function rememberBaseline(client: pg.ClientBase, json: string): SessionBaseline {
  const baseline = JSON.parse(json) as SessionBaseline;
  baselines.set(client, baseline);
  return baseline;
}

/** Behind a transaction-mode pooler: the server's defaults, nobody's session state. */
export const POOLED_BASELINE: SessionBaseline = { settings: {}, role: null };

/**
 * After a ROLLBACK behind a transaction-mode pooler: what a rollback leaves of the work's session
 * (session advisory locks, SQL prepared statements) is removed before the server connection goes
 * to the pooler's next client; the store's own statements there are unnamed.
 */
export const POOLED_AFTER_ROLLBACK = `select pg_catalog.pg_advisory_unlock_all();
  do $$ declare n text; begin
    for n in select name from pg_catalog.pg_prepared_statements where from_sql loop
      execute pg_catalog.format('deallocate %I', n);
    end loop;
  end $$`;

/**
 * Ends the transaction at its TTL whatever the work set (`statement_timeout = 0`, an idle
 * transaction with its timeout off): at the deadline, a connection of its own (opened then, with
 * the pool's settings, never one of the pool's) terminates the backend, only while it still runs
 * this transaction (its xid), so a connection given back and reused is never touched. Asked
 * through the pool, the termination waited for a free connection: with every one held by
 * stalled holders it never came, and they ran on past their TTL and committed. Disarmed before
 * the COMMIT is sent: ending a COMMIT that waits for a synchronous standby keeps it committed
 * locally, unreplicated. Returns the disarm, and whether it fired.
 */
export function armDeadline(
  pool: pg.Pool,
  options: { pid: number; xid: string; ms: number },
): { disarm(): void; readonly fired: boolean } {
  let fired = false;
  const timer = setTimeout(() => {
    fired = true;
    terminate(pool, options).catch(() => {
      // The database unreachable: its own timeouts, or the lost connection, end the transaction.
    });
  }, options.ms);
  timer.unref?.();
  return {
    disarm: () => clearTimeout(timer),
    get fired() {
      return fired;
    },
  };
}

/** Terminates the backend `pid` while it runs transaction `xid`, on a connection of its own. */
async function terminate(pool: pg.Pool, options: { pid: number; xid: string }): Promise<void> {
  const client = new pg.Client(pool.options);
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query(
      `select pg_catalog.pg_terminate_backend(pid) from pg_catalog.pg_stat_activity
        where pid operator(pg_catalog.=) $1::int
          and backend_xid::text::bigint operator(pg_catalog.=) ($2::bigint operator(pg_catalog.%) 4294967296)`,
      [options.pid, options.xid],
    );
  } finally {
    await client.end().catch(() => {});
  }
}
