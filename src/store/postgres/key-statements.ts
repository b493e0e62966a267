import pg from 'pg';
import { maskConnectionString } from '../../core/mask.js';
import type { KeyRecord, KeyState, RetrySafety } from '../../core/types.js';
import { int, plainBytes } from './sql.js';

/**
 * `case when [condition and] <lock_timeout set to value> then expression end`: the lock wait
 * bound (lockWaitMs) set only where a lock may be waited for, for this statement alone, and before
 * the call that may wait (Postgres evaluates the CASE's condition first, and AND from the left).
 */
function lockWaitFirst(value: string, expression: string, condition?: string): string {
  const set = `pg_catalog.set_config('lock_timeout', ${value}, true) is not null`;
  return `case when ${
    condition === undefined
      ? ''
      : `${condition}
                and `
  }${set}
           then ${expression} end`;
}

/** The columns of a key row as {@link KeyRow} reads them. */
export const keyColumns = (s: string): string =>
  `key, resource, state, fence, retry_safety, result, reason, ${s}.epoch_ms(updated_at) as updated_at_ms`;

/**
 * How many keys are uncertain and for how long the oldest has been; `sideeffect stats` asks the
 * same. Every function and operator is pg_catalog's or the store's, whatever the caller's path.
 */
export const uncertainBacklog = (s: string): string => `select pg_catalog.count(*) as count,
    coalesce(${s}.epoch_ms(${s}.store_now()) operator(pg_catalog.-)
             ${s}.epoch_ms(pg_catalog.min(updated_at)), 0) as oldest_age_ms
    from ${s}.keys where state = 'uncertain'`;

/** The key state machine's statements, one decision each (see PgStore). */
export const KEY_SQL = {
  // A done key with this binding is answered by one primary-key read and nothing else:
  // acquire_fresh() sits in a CASE, evaluated only when there is no such row, so a replay executes
  // no function and initializes no function scan (as a UNION branch it cost a quarter of the
  // replay's database time, and its six columns a sixth of the Node time to parse). The fallback's
  // row comes back as JSON: a grant of a key never seen on a free resource, in the same statement,
  // or whatever acquire() decided for every other case.
  // `state` is judged outside the WHERE on purpose: with `state = 'done'` in it, a connection whose
  // cached generic plan was made while the table was nearly empty scanned the state index, every
  // done key, on each replay.
  // The lock wait bound ($7, see lockWaitMs) is set only where a lock may be waited for: in the
  // CASE, before acquire_fresh() (Postgres evaluates AND from the left), for this statement alone.
  acquire: (s: string) => `select h.result as o_result,
      ${lockWaitFirst('$7', `pg_catalog.to_jsonb(${s}.acquire_fresh($1, $2, $3, $4, $5, $6))`, 'h.done is not true')} as o_fresh
    from (select) as one
    left join (select state = 'done' as done, result from ${s}.keys
               where key = $1 and resource = $2 and digest = $3) as h on true`,
  // The holder's calls wait for their resource's row at most lockWaitMs too (the last parameter),
  // set first in a CASE as in acquire: a transactional grant that took the resource over keeps
  // that row locked for its whole work.
  renew: (s: string) => `select
      ${lockWaitFirst('$6', `pg_catalog.to_jsonb(${s}.renew($1, $2, $3, $4, $5))`)} as o_renewed`,
  // The holder's complete in one statement: release the resource and move the key to done,
  // recording on the row the state it was completed from (the completion's event, see events).
  // complete_held() (0013: the runtime role writes no table itself) matches only this holder at
  // this fence, holding its key held or applying (the invariant every transition keeps), so it is
  // the fence check and the key moves with it. Nothing moved means nothing was written: complete()
  // judges it (a repeat, a stale fence, or a broken invariant, which it raises). The lock wait
  // bound ($5) is set in the CASE before the subquery (an initplan, run when first needed) runs.
  complete: (s: string) => `select
      ${lockWaitFirst('$5::text', `(select count(*) from ${s}.complete_held($1, $2, $3, $4))`)} as o_moved`,
  completeJudged: (s: string) => `select
      ${lockWaitFirst('$5', `pg_catalog.to_jsonb(${s}.complete($1, $2, $3, $4))`)} as o_judged`,
  markUncertain: (s: string) => `select
      ${lockWaitFirst('$5', `${s}.mark_uncertain($1, $2, $3, $4)`)} as o_outcome`,
  release: (s: string) => `select
      ${lockWaitFirst('$4', `${s}.release($1, $2, $3)`)} as o_outcome`,
  resolve: (s: string) => `select * from ${s}.resolve_uncertain($1, $2, $3, $4, $5, $6, $7)`,
  purge: (s: string) => `select ${s}.purge_batch($1, $2) as o_purged`,
  inspect: (s: string) => `select ${keyColumns(s)} from ${s}.keys where key = $1`,
  list: (s: string) => `select ${keyColumns(s)} from ${s}.keys where $1::text is null or state = $1
    order by updated_at desc limit $2`,
  listOldest: (
    s: string,
  ) => `select ${keyColumns(s)} from ${s}.keys where $1::text is null or state = $1
    order by updated_at asc limit $2`,
  binding: (s: string) => `select resource, digest from ${s}.keys where key = $1`,
  uncertainBacklog: (s: string) => uncertainBacklog(s),
  // The logged events, with the two recorded on the key row in their place: its first grant (or
  // transactional commit) before them, its completion after them. Each reads as it would logged.
  events: (s: string) => `select key, from_state, to_state, fence, reason, actor, identity, db_user,
    ${s}.epoch_ms(at) as at_ms from (
      select key, 'free' as from_state, granted_state as to_state, granted_fence as fence,
        case granted_state when 'done' then 'applied in transaction' else 'granted' end as reason,
        case granted_state when 'done' then 'executeInTransaction' else 'acquire' end as actor,
        granted_at as at, null::text as identity, null::text as db_user, 0 as part, 0::bigint as id
      from ${s}.keys where key = $1 and granted_at is not null
      union all
      select key, from_state, to_state, fence, reason, actor, at, identity, db_user, 1, id
      from ${s}.events where key = $1
      union all
      select key, completed_from, 'done', fence, 'completed', 'complete', updated_at, null, null,
        2, 0
      from ${s}.keys where key = $1 and completed_from is not null
    ) logged order by part, id`,
};

/**
 * The lock wait of an acquire's first look: long enough for a row another statement holds for
 * its own few milliseconds, far too short to hold a connection while a transaction holds it.
 */
export const FIRST_LOOK = '5ms';

/** What the acquire statement answers: a done key's result, or acquire_fresh()'s row as JSON. */
export interface AcquireHit {
  o_result: Buffer | null;
  o_fresh: AcquireJson | null;
}

/** An acquire function's row through to_jsonb: numbers as numbers, bytea as its text form. */
export type AcquireJson = Omit<AcquireRow, 'o_result'> & { o_result: string | null };

/**
 * acquire()'s `o_outcome` for a grant: `applied` in the schema (0001_init.sql, frozen, and 0.1.0
 * workers read it), `granted` in TypeScript, where `applied` means only that an apply took effect.
 */
export const GRANTED_ROW = 'applied';

/**
 * acquire_batch()'s `o_outcome` (0018) for a key whose resource row another transaction holds:
 * found without waiting, so the key's caller goes straight to its own wait for the row.
 */
export const HELD_ROW = 'held';

/** What the acquire functions answer. */
export interface AcquireRow {
  o_outcome: string;
  o_fence: string | number | null;
  o_expires_at_ms: string | number | null;
  o_retry_after_ms: string | number | null;
  o_result: Buffer | null;
  o_reason: string | null;
}

/** An acquire function's row, come back through to_jsonb. */
export function fromJson(row: AcquireJson): AcquireRow {
  return { ...row, o_result: row.o_result === null ? null : parseBytea(row.o_result) };
}

/** pg's own bytea parser, for the bytea inside JSON: it reads whichever `bytea_output` the session uses. */
export const parseBytea = pg.types.getTypeParser(pg.types.builtins.BYTEA, 'text') as (
  text: string,
) => Buffer;

/** A key's row as the statements select it ({@link keyColumns}). */
export interface KeyRow {
  key: string;
  resource: string;
  state: KeyState;
  fence: string;
  retry_safety: RetrySafety;
  result: Buffer | null;
  reason: string | null;
  updated_at_ms: string;
}

/** A key row as a KeyRecord. */
export function toRecord(row: KeyRow): KeyRecord {
  const record: KeyRecord = {
    key: row.key,
    resource: row.resource,
    state: row.state,
    fence: int(row.fence),
    retrySafety: row.retry_safety,
    updatedAt: int(row.updated_at_ms),
  };
  if (row.result) record.result = { payload: plainBytes(row.result) };
  // Rows stored before reasons were masked on the way in are masked on the way out.
  if (row.reason !== null) record.reason = maskConnectionString(row.reason);
  return record;
}
