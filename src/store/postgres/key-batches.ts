import type pg from 'pg';
import {
  ContendedError,
  InvalidActionError,
  type StoreUnavailableError,
  UnexpectedStoreAnswerError,
} from '../../core/errors.js';
import type { RetrySafety } from '../../core/types.js';
import {
  AGAIN,
  Batcher,
  type BatchKind,
  type BatchLimits,
  BatchTraffic,
  batchEveryCall,
} from './batcher.js';
import {
  type AcquireRow,
  FIRST_LOOK,
  type KEY_SQL,
  type KeyRow,
  keyColumns,
  parseBytea,
} from './key-statements.js';
import { lockWaitExceeded, runStatement, type StatementRunner } from './session.js';
import { statements } from './sql.js';

/** One acquire's first look, as a shared statement takes it. */
export interface AcquireCall {
  key: string;
  resource: string;
  digest: Buffer;
  retrySafety: RetrySafety;
  ttlMs: number;
  applying: boolean;
}

/** The holder's calls that share statements. */
type HolderOperation = 'renew' | 'complete' | 'markUncertain' | 'release';

/** The one-key function holder_batch() calls for each. */
const HOLDER_FUNCTION: Record<HolderOperation, string> = {
  renew: 'renew',
  complete: 'complete',
  markUncertain: 'mark_uncertain',
  release: 'release',
};

/** A holder's call: its key, resource and fence, and what its operation adds. */
export interface HolderCall {
  key: string;
  resource: string;
  fence: number;
  ttlMs?: number;
  applying?: boolean;
  result?: Buffer;
  reason?: string;
}

/** What the one-key function answers: its outcome, a renewal's expiry, a repeat's first result. */
interface HolderAnswer {
  o_outcome: string;
  o_expires_at_ms: string | number | null;
  o_result: Buffer | null;
}

/**
 * The statements that carry many keys (migration 0015). In each, the arrays are the calls in
 * arrival order and `o_ord` is a call's place in them.
 */
const BATCH_SQL = {
  // Done keys with this binding are answered by the plain read, as in the one-key acquire;
  // acquire_batch() gets the others, and is not called at all when there are none (the lateral
  // call runs once per row of `rest`, which the filter leaves empty). The multi-array unnest is
  // spelt out as ROWS FROM, the only form that takes pg_catalog's unnest by its full name.
  acquireBatch: (s: string) => `with called as materialized (
      select c.ord::integer as ord, k.state = 'done' as done, k.result
        from rows from (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
                        pg_catalog.unnest($3::bytea[]))
             with ordinality as c(key, resource, digest, ord)
        left join ${s}.keys k on k.key = c.key and k.resource = c.resource and k.digest = c.digest
    )
    select ord as o_ord, 'replayed' as o_outcome, null::bigint as o_fence,
           null::bigint as o_expires_at_ms, null::bigint as o_retry_after_ms,
           result as o_result, null::text as o_reason
      from called where done
    union all
    select f.o_ord, f.o_outcome, f.o_fence, f.o_expires_at_ms, f.o_retry_after_ms, f.o_result,
           f.o_reason
      from (select pg_catalog.array_agg(ord) as ords from called where done is not true) as rest,
           lateral ${s}.acquire_batch(rest.ords, $1::text[], $2::text[], $3::bytea[],
                                      $4::text[], $5::bigint[], $6::boolean[], $7::text) as f
     where rest.ords is not null`,
  holderBatch: (s: string) => `select o_ord, o_outcome, o_expires_at_ms, o_result
    from ${s}.holder_batch($1::text, $2::text[], $3::text[], $4::bigint[], $5::bigint[],
                           $6::boolean[], $7::bytea[], $8::text[], $9::text)`,
  inspectBatch: (s: string) => `select c.ord::integer as o_ord, k.*
    from pg_catalog.unnest($1::text[]) with ordinality as c(name, ord)
    join lateral (select ${keyColumns(s)} from ${s}.keys where key = c.name) as k on true`,
};

/**
 * Calls of one kind per statement at most (see PgStoreOptions.batching): above Postgres's cache of
 * 64 subtransactions per transaction (a key the set-based step leaves is judged in a block of its
 * own), every other session's snapshot would look them up on disk while the statement runs.
 */
const MAX_KEYS = 64;
const DEFAULT_KEYS = 32;
/** Payload bytes per statement: 32 results of 1 MiB would be one message of tens of MiB. */
const MAX_BYTES = 1024 * 1024;

/** The limits `batching` asks for, or undefined when it turns batching off. */
export function batchLimits(
  option: boolean | { maxKeys?: number } | undefined,
): BatchLimits | undefined {
  if (option === false) return undefined;
  if (option === undefined || option === true) {
    return { maxKeys: DEFAULT_KEYS, maxBytes: MAX_BYTES };
  }
  if (typeof option !== 'object' || option === null) {
    throw new InvalidActionError(
      'batching',
      `must be a boolean or { maxKeys }, got ${String(option)}`,
    );
  }
  const maxKeys = option.maxKeys ?? DEFAULT_KEYS;
  if (!Number.isSafeInteger(maxKeys) || maxKeys < 1 || maxKeys > MAX_KEYS) {
    throw new InvalidActionError(
      'batching',
      `maxKeys must be an integer from 1 to ${MAX_KEYS}, got ${String(maxKeys)}`,
    );
  }
  const everyCall = (option as { [batchEveryCall]?: unknown })[batchEveryCall] === true;
  return { maxKeys, maxBytes: MAX_BYTES, everyCall };
}

/**
 * PgStore's calls that may share a statement (PgStoreOptions.batching): an acquire's first look,
 * the holder's renew, complete, markUncertain and release, and inspect, each kind with a queue of
 * its own. Also each call's one-key path, which a call alone takes, and a key a shared statement
 * could not judge, and every call with batching off.
 */
export class KeyBatches {
  readonly acquire: (call: AcquireCall) => Promise<AcquireRow>;
  readonly renew: (call: HolderCall) => Promise<HolderAnswer>;
  readonly complete: (call: HolderCall) => Promise<HolderAnswer>;
  readonly markUncertain: (call: HolderCall) => Promise<HolderAnswer>;
  readonly release: (call: HolderCall) => Promise<HolderAnswer>;
  readonly inspect: (key: string) => Promise<KeyRow | undefined>;
  readonly #rows: StatementRunner<keyof typeof KEY_SQL>;
  readonly #lockWaitMs: number;
  readonly #lockTimeout: string;

  constructor(options: {
    pool: pg.Pool;
    schema: string;
    named: boolean;
    limits: BatchLimits | undefined;
    rows: StatementRunner<keyof typeof KEY_SQL>;
    lockWaitMs: number;
    /** An acquire's first look alone (the store's one-key acquire at FIRST_LOOK). */
    acquireAlone: (call: AcquireCall) => Promise<AcquireRow>;
  }) {
    const { pool, limits } = options;
    this.#rows = options.rows;
    this.#lockWaitMs = options.lockWaitMs;
    this.#lockTimeout = `${options.lockWaitMs}ms`;
    const sql = statements(options.schema, BATCH_SQL, { named: options.named });
    const traffic = new BatchTraffic();
    const shared = <I, O>(kind: BatchKind<I, O>): ((item: I) => Promise<O>) => {
      if (!limits) return (item) => kind.one(item);
      const batcher = new Batcher(kind, limits, traffic);
      return (item) => batcher.run(item);
    };
    this.acquire = shared<AcquireCall, AcquireRow>({
      one: options.acquireAlone,
      many: async (calls) => {
        // Each key waits for a held row at most as long as a first look does.
        const rows = await runStatement<AcquireRow & { o_ord: number }>(
          pool,
          'acquire',
          sql.acquireBatch,
          [
            calls.map((c) => c.key),
            calls.map((c) => c.resource),
            calls.map((c) => c.digest),
            calls.map((c) => c.retrySafety),
            calls.map((c) => c.ttlMs),
            calls.map((c) => c.applying),
            FIRST_LOOK,
          ],
        );
        return byOrdinal(calls.length, rows);
      },
      // One key on two resources is judged in arrival order, one statement after the other (in
      // one, the resources' order would decide). On one resource the calls share a statement,
      // judged in arrival order there: a storm of replays of one key is one read.
      name: (call) => ({ name: call.key, with: call.resource }),
    });
    const holder = (operation: HolderOperation) =>
      shared<HolderCall, HolderAnswer>({
        one: (call) => this.#holderAlone(operation, call),
        many: async (calls) => {
          const column = <V>(value: (call: HolderCall) => V | undefined): (V | null)[] | null =>
            calls.some((c) => value(c) !== undefined) ? calls.map((c) => value(c) ?? null) : null;
          // A key whose row another transaction holds past a first look's wait is asked alone,
          // waiting lockWaitMs as ever.
          const rows = await runStatement<HolderAnswer & { o_ord: number }>(
            pool,
            operation,
            sql.holderBatch,
            [
              HOLDER_FUNCTION[operation],
              calls.map((c) => c.key),
              calls.map((c) => c.resource),
              calls.map((c) => c.fence),
              column((c) => c.ttlMs),
              column((c) => c.applying),
              column((c) => c.result),
              column((c) => c.reason),
              FIRST_LOOK,
            ],
          );
          return byOrdinal(calls.length, rows);
        },
        bytes: (call) => (call.result?.length ?? 0) + Buffer.byteLength(call.reason ?? ''),
      });
    this.renew = holder('renew');
    this.complete = holder('complete');
    this.markUncertain = holder('markUncertain');
    this.release = holder('release');
    this.inspect = shared<string, KeyRow | undefined>({
      one: async (key) => (await this.#rows<KeyRow>('inspect', [key]))[0],
      many: async (keys) => {
        const rows = await runStatement<KeyRow & { o_ord: number }>(
          pool,
          'inspect',
          sql.inspectBatch,
          [keys],
        );
        const found: (KeyRow | undefined)[] = keys.map(() => undefined);
        for (const { o_ord, ...row } of rows) found[o_ord - 1] = row;
        return found;
      },
    });
  }

  /** A holder's call by its one-key statement(s). */
  async #holderAlone(operation: HolderOperation, call: HolderCall): Promise<HolderAnswer> {
    const keyed = [call.key, call.resource, call.fence];
    const answer = (o_outcome: string, o_expires_at_ms: number | null = null): HolderAnswer => ({
      o_outcome,
      o_expires_at_ms,
      o_result: null,
    });
    switch (operation) {
      case 'renew': {
        const [{ o_renewed }] = (await this.#holderRows<{
          o_renewed: { o_outcome: string; o_expires_at_ms: number | null };
        }>('renew', call, [...keyed, call.ttlMs, call.applying])) as [
          { o_renewed: { o_outcome: string; o_expires_at_ms: number | null } },
        ];
        return answer(o_renewed.o_outcome, o_renewed.o_expires_at_ms);
      }
      case 'complete': {
        const values = [...keyed, call.result];
        const [{ o_moved }] = (await this.#holderRows<{ o_moved: string }>(
          'complete',
          call,
          values,
        )) as [{ o_moved: string }];
        if (Number(o_moved) === 1) return answer('completed');
        const [{ o_judged }] = (await this.#holderRows<{
          o_judged: { o_outcome: string; o_result: string | null };
        }>('completeJudged', call, values)) as [
          { o_judged: { o_outcome: string; o_result: string | null } },
        ];
        const { o_outcome, o_result } = o_judged;
        return { ...answer(o_outcome), o_result: o_result === null ? null : parseBytea(o_result) };
      }
      case 'markUncertain':
      case 'release': {
        const values = operation === 'release' ? keyed : [...keyed, call.reason];
        const [row] = await this.#holderRows<{ o_outcome: string }>(operation, call, values);
        return answer(row!.o_outcome);
      }
    }
  }

  /**
   * A holder's statement, waiting for its resource's row at most lockWaitMs: past that (a
   * transactional grant holds the row for its work) it throws ContendedError, nothing written,
   * instead of holding a pool connection for the rest of that transaction.
   */
  async #holderRows<R extends pg.QueryResultRow>(
    operation: 'renew' | 'complete' | 'completeJudged' | 'markUncertain' | 'release',
    call: HolderCall,
    values: unknown[],
  ): Promise<R[]> {
    try {
      return await this.#rows<R>(operation, [...values, this.#lockTimeout]);
    } catch (error) {
      if (!lockWaitExceeded(error)) throw error;
      throw new ContendedError(call.key, call.resource, this.#lockWaitMs, {
        cause: (error as StoreUnavailableError).cause,
      });
    }
  }
}

/**
 * Each call's answer by its place in the call (AGAIN where its block failed); a call the
 * statement left unanswered is an error.
 */
function byOrdinal<R extends { o_ord: number; o_outcome: string }>(
  count: number,
  rows: R[],
): (R | typeof AGAIN)[] {
  const answers = new Array<R | typeof AGAIN>(count);
  for (const row of rows) answers[row.o_ord - 1] = row.o_outcome === 'again' ? AGAIN : row;
  for (let i = 0; i < count; i++) {
    if (!(i in answers)) {
      throw new UnexpectedStoreAnswerError(`no row for call ${i + 1} of a batch`);
    }
  }
  return answers;
}
