import type { TransactionIsolation } from '../../core/store.js';
import { quoteLiteral } from './sql.js';
import type { SessionBaseline } from './transaction-guard.js';

/**
 * The two round trips of its own a transactional effect costs (migration 0016): one that opens the
 * transaction and takes the grant, one that writes the key, commits and puts the session back.
 * Each is ONE simple query, since BEGIN, RESET and COMMIT cannot share a round trip with anything
 * through the extended protocol; what they compute lives in the schema's plpgsql functions, whose
 * plans each connection keeps, so the text parsed per effect is a few short calls.
 *
 * Values are inlined in ASCII, which reads the same in every client encoding: the finish runs
 * after the work, which may have changed `client_encoding`, and Postgres converts a query's text
 * from it before any statement of that query has run. A key read in another encoding would be
 * recorded under another name, and its effect run again.
 */

const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;

/**
 * A text value as an SQL expression of ASCII characters only: printable ASCII as a literal (in
 * the database's collation, like a parameter), anything else as its UTF-8 bytes in hex, given the
 * database's collation too: convert_from()'s result would otherwise take the collation of its
 * `name` argument ("C"), and the functions it is passed to compare every text argument in it, so
 * the key and resource would be looked up without their indexes (a scan of the table per call).
 */
function text(value: string): string {
  if (PRINTABLE_ASCII.test(value)) return quoteLiteral(value);
  return `pg_catalog.convert_from(pg_catalog.decode('${Buffer.from(value, 'utf8').toString('hex')}', 'hex'), 'UTF8') collate pg_catalog."default"`;
}

/** Bytes as a bytea literal, read alike whatever `standard_conforming_strings` is. */
function bytes(value: Uint8Array): string {
  const buffer = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  return `E'\\\\x${buffer.toString('hex')}'::bytea`;
}

/**
 * The caller's role and search_path, which the store's functions (run with their owner's) cannot
 * see. The role is a `name`, whose collation ("C") would otherwise become the whole call's (see
 * {@link text}).
 */
const CALLER = `current_user::text collate pg_catalog."default", pg_catalog.current_setting('search_path')`;

/** What {@link openTransaction} is told. */
export interface OpenTransaction {
  isolation: TransactionIsolation;
  key: string;
  resource: string;
  digest: Uint8Array;
  ttlMs: number;
  /** The grant's lock wait, as a `lock_timeout` value. */
  lockWait: string;
  /**
   * Whether the session is read before the work (its fingerprint and counts): a connection's
   * first effect, or behind a transaction-mode pooler, where each transaction may land on another
   * server connection. Otherwise the last finish's fingerprint stands for it.
   */
  session: boolean;
  /** The connection's first effect: its session baseline (SESSION_BASELINE) is asked first. */
  baseline?: string;
}

/**
 * BEGIN, then tx_begin() (migration 0023): the session's fingerprint if asked, the transaction's
 * bounds and the grant. The results, in order: BEGIN's, the baseline if asked, tx_begin's row.
 */
export function openTransaction(schema: string, o: OpenTransaction): string {
  return [
    `begin isolation level ${o.isolation}`,
    ...(o.baseline ? [`select ${o.baseline} as baseline`] : []),
    `select * from ${schema}.tx_begin(${text(o.key)}, ${text(o.resource)}, ${bytes(o.digest)}, '${o.ttlMs}ms', '${o.lockWait}', ${CALLER}, ${o.session})`,
  ].join(';\n');
}

/** What {@link finishTransaction} is told. */
export interface FinishTransaction {
  key: string;
  resource: string;
  digest: Uint8Array;
  fence: number;
  retrySafety: string;
  result: Uint8Array;
  /** The grant's transaction (tx_open's o_xid). */
  xid: string;
  ttlMs: number;
  /** What is left of the TTL for the whole transaction (Postgres 17 and later). */
  remainingMs: number;
  baseline: SessionBaseline;
  pooled: boolean;
  /** tx_begin's counts, behind a transaction-mode pooler. */
  temp: string | null;
  prepared: string | null;
  /** Whether the work may have prepared or dropped SQL prepared statements: they are counted. */
  countPrepared: boolean;
}

/**
 * After the work, inside its transaction and with its settings still in force (its SET LOCAL
 * values, its role, its synchronous_commit hold through its COMMIT, for its deferred triggers
 * too): tx_settle() (migration 0017: the pooler's checks, the advisory locks, the bounds again,
 * the commit settings the store's record needs, the key) under the connection's own role, which
 * may run the store's functions where the work's role may not, the work's role back, and COMMIT.
 * Then, committed, the session goes back to the connection's baseline (every setting, the role
 * and session user; pending LISTENs and open cursors go too), and its fingerprint is taken
 * ({@link sessionState}).
 * Results: tx_settle's at index {@link SETTLED}, the fingerprint last.
 */
export function finishTransaction(schema: string, o: FinishTransaction): string {
  const role = o.baseline.role === null ? `'none'` : text(o.baseline.role);
  const count = (n: string | null) => (n === null ? 'null' : `${BigInt(n)}`);
  const parts = [
    // Each statement runs under the statement_timeout in force when it starts: the work's (even
    // '1ms') for this short one alone, the connection's own after the COMMIT (for the reset),
    // the TTL's for the rest of the transaction.
    'set statement_timeout to default',
    `select pg_catalog.set_config('statement_timeout', '${o.ttlMs}ms', true), pg_catalog.set_config('sideeffect.work_role', pg_catalog.current_setting('role'), true), pg_catalog.set_config('role', ${role}, true)`,
    `select ${schema}.tx_settle(${text(o.key)}, ${text(o.resource)}, ${bytes(o.digest)}, ${o.fence}, ${text(o.retrySafety)}, ${bytes(o.result)}, ${BigInt(o.xid)}, '${o.ttlMs}ms', '${Math.max(1, Math.floor(o.remainingMs))}ms', ${o.pooled}, ${count(o.temp)}, ${count(o.prepared)}) as at_ms`,
    `select pg_catalog.set_config('role', pg_catalog.current_setting('sideeffect.work_role'), true)`,
    'commit',
    'reset all',
    'reset session authorization',
    'reset role',
    'unlisten *',
    'close all',
  ];
  if (Object.keys(o.baseline.settings).length > 0) {
    parts.push(
      `select pg_catalog.count(pg_catalog.set_config(key, value, false)) from pg_catalog.jsonb_each_text(${text(JSON.stringify(o.baseline.settings))}::jsonb)`,
    );
  }
  if (o.baseline.role !== null)
    parts.push(`select pg_catalog.set_config('role', ${text(o.baseline.role)}, false)`);
  parts.push(sessionState(schema, o.countPrepared));
  return parts.join(';\n');
}

/** The index of tx_settle's result among {@link finishTransaction}'s. */
export const SETTLED = 2;

/**
 * The session's fingerprint (tx_session_mark, migration 0023) as a statement of its own, and the
 * count of its SQL prepared statements only when asked: counting reads every prepared statement
 * of the connection, the driver's named ones too.
 */
export function sessionState(schema: string, countPrepared: boolean): string {
  const prepared = countPrepared ? `${schema}.tx_sql_prepared()` : 'null::bigint';
  return `select ${schema}.tx_session_mark(${CALLER}) as session, ${prepared} as prepared`;
}

/** What tx_settle() refused, raised before its COMMIT (0016, 0017), with the refusal's detail. */
export interface FinishRefusal {
  /**
   * SE161: the key was committed meanwhile; SE162: the work ended the transaction; SE163: session
   * state left behind a pooler; SE164: the work changed session_replication_role.
   */
  code: 'SE161' | 'SE162' | 'SE163' | 'SE164';
  detail: string | undefined;
}

const REFUSALS: readonly string[] = ['SE161', 'SE162', 'SE163', 'SE164'];

/** tx_settle()'s refusal in a failure (the database's error, or the store's error wrapping it). */
export function finishRefusal(error: unknown): FinishRefusal | undefined {
  const cause = (error as { cause?: unknown } | undefined)?.cause;
  for (const at of [error, cause]) {
    const { code, detail } = (at ?? {}) as { code?: unknown; detail?: string };
    if (typeof code === 'string' && REFUSALS.includes(code))
      return { code: code as FinishRefusal['code'], detail };
  }
  return undefined;
}
