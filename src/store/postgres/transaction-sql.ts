import type { TransactionIsolation } from '../../core/store.js';
import { quoteLiteral } from './sql.js';
import type { SessionBaseline } from './transaction-guard.js';

/**
 * The two round trips of its own a transactional effect costs (migration 0016): one that opens the
 * transaction and takes the grant, one that puts the session back, writes the key and commits.
 * Each is ONE simple query, since BEGIN, RESET and COMMIT cannot share a round trip with anything
 * through the extended protocol; what they compute lives in the schema's plpgsql functions, whose
 * plans each connection keeps, so the text parsed per effect is a few short calls.
 *
 * Values are inlined in ASCII, which reads the same in every client encoding: the finish runs
 * after the work, which may have changed `client_encoding`, and Postgres converts a query's text
 * from it before the RESET in that query has run. A key read in another encoding would be
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
  /** Behind a transaction-mode pooler: the counts the finish compares with are taken. */
  pooled: boolean;
  /** The connection's first effect: its session baseline (SESSION_BASELINE) is asked first. */
  baseline?: string;
}

/**
 * BEGIN, then tx_open(): the session's fingerprint, the transaction's bounds and the grant. The
 * results, in order: BEGIN's, the baseline if asked, tx_open's row.
 */
export function openTransaction(schema: string, o: OpenTransaction): string {
  return [
    `begin isolation level ${o.isolation}`,
    ...(o.baseline ? [`select ${o.baseline} as baseline`] : []),
    `select * from ${schema}.tx_open(${text(o.key)}, ${text(o.resource)}, ${bytes(o.digest)}, '${o.ttlMs}ms', '${o.lockWait}', ${CALLER}, ${o.pooled})`,
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
  /** tx_open's counts, behind a transaction-mode pooler. */
  temp: string | null;
  prepared: string | null;
}

/**
 * After the work, inside its transaction: every setting the work changed, with SET or SET LOCAL,
 * goes back to the connection's baseline, the role and session user with it; pending LISTENs and
 * open cursors go too. Then tx_finish() (the fingerprint, the advisory locks, the bounds again,
 * the key) and COMMIT. So the key is written and the transaction committed with the connection's
 * own settings (never with `synchronous_commit = off` or `session_replication_role = replica`
 * the work chose), and a SET of the work, session-level or not, ends with the transaction. The
 * last result is COMMIT's, the one before it tx_finish's row.
 */
export function finishTransaction(schema: string, o: FinishTransaction): string {
  const parts = [
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
  const count = (n: string | null) => (n === null ? 'null' : `${BigInt(n)}`);
  parts.push(
    `select * from ${schema}.tx_finish(${text(o.key)}, ${text(o.resource)}, ${bytes(o.digest)}, ${o.fence}, ${text(o.retrySafety)}, ${bytes(o.result)}, ${BigInt(o.xid)}, '${o.ttlMs}ms', '${Math.max(1, Math.floor(o.remainingMs))}ms', ${CALLER}, ${o.pooled}, ${count(o.temp)}, ${count(o.prepared)})`,
    'commit',
  );
  return parts.join(';\n');
}

/** The session's fingerprint (tx_session_state), as a statement of its own. */
export function sessionState(schema: string): string {
  return `select ${schema}.tx_session_state(${CALLER}) as session`;
}

/** What tx_finish() refused, raised before its COMMIT (0016), with the refusal's detail. */
export interface FinishRefusal {
  /** SE161: the key was committed meanwhile; SE162: the work ended the transaction; SE163: session state left behind a pooler. */
  code: 'SE161' | 'SE162' | 'SE163';
  detail: string | undefined;
}

const REFUSALS: readonly string[] = ['SE161', 'SE162', 'SE163'];

/** tx_finish()'s refusal in a failure (the database's error, or the store's error wrapping it). */
export function finishRefusal(error: unknown): FinishRefusal | undefined {
  const cause = (error as { cause?: unknown } | undefined)?.cause;
  for (const at of [error, cause]) {
    const { code, detail } = (at ?? {}) as { code?: unknown; detail?: string };
    if (typeof code === 'string' && REFUSALS.includes(code))
      return { code: code as FinishRefusal['code'], detail };
  }
  return undefined;
}
