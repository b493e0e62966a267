import type pg from 'pg';
import {
  InvalidActionError,
  NotUncertainError,
  PendingVerdictsFullError,
  StaleVerdictError,
  UnexpectedStoreAnswerError,
} from '../../core/errors.js';
import { maskConnectionString } from '../../core/mask.js';
import type { PendingVerdictStore } from '../../core/store.js';
import type { Key, Result } from '../../core/types.js';
import {
  checkPendingPage,
  checkReason,
  checkResolution,
  checkText,
  checkWithdrawal,
  type Limits,
  storableKey,
} from '../../core/validate.js';
import type {
  PendingVerdict,
  PendingVerdictOutcome,
  PendingVerdictPage,
  PendingVerdictState,
  Resolution,
  VerdictJudgement,
  Withdrawal,
} from '../../core/verdict.js';
import { type StatementRunner, statementRunner } from './session.js';
import { asBuffer, int, plainBytes, statements } from './sql.js';

/**
 * The columns of a pending verdict as {@link PendingRow} reads them (`v` joined to its key `k`):
 * one still pending whose key was decided or moved on reads `late`, with why, judged or not.
 */
const pendingColumns = (s: string) =>
  `v.id, v.key, v.fence, v.applied, v.result, v.reason, v.actor, v.identity,
   case when ${OVERTAKEN} then 'late' else v.state end as state,
   case when ${OVERTAKEN} then ${LATE_WHY} else v.why end as why,
   ${s}.epoch_ms(v.at) as at_ms, ${s}.epoch_ms(v.judged_at) as judged_at_ms`;
const OVERTAKEN = `v.state = 'pending' and (k.state is distinct from 'uncertain' or k.fence <> v.fence)`;
// The words judge_verdict() (0010) stores for a verdict it finds late.
// Typed text on both sides, so no `||` on a caller's search_path matches better than pg_catalog's.
const LATE_WHY = `case when k.fence <> v.fence
  then 'the key moved on to attempt (fence) '::text || k.fence::text
  else 'the key was decided before this verdict was checked (state: '::text
    || coalesce(k.state, 'unknown'::text) || ')'::text end`;
const WAITING = `v.state = 'pending' and k.state = 'uncertain' and k.fence = v.fence`;

/** The statements of pending verdicts (0010, bounded and withdrawable since 0019). */
const VERDICT_SQL = {
  hold: (s: string) => `select * from ${s}.hold_verdict($1, $2, $3, $4, $5, $6, $7)`,
  judge: (s: string) => `select * from ${s}.judge_verdict($1, $2, $3)`,
  withdraw: (s: string) => `select * from ${s}.withdraw_verdict($1, $2, $3, $4, $5)`,
  pendingVerdicts: (s: string) => `select ${pendingColumns(s)} from ${s}.pending_verdicts v
    left join ${s}.keys k on k.key = v.key
    where v.key = $1 and v.id > $2 and (not $4::boolean or (${WAITING}))
    order by v.id limit $3`,
  pendingVerdict: (s: string) => `select ${pendingColumns(s)} from ${s}.pending_verdicts v
    left join ${s}.keys k on k.key = v.key where v.id = $1`,
  pendingVerdictCounts: (s: string) => `select v.key, pg_catalog.count(*) as n
    from ${s}.pending_verdicts v join ${s}.keys k on k.key = v.key
    where v.key = any($1::text[]) and ${WAITING} group by v.key`,
  pendingVerdictKeys: (s: string) => `select v.key from ${s}.pending_verdicts v
    join ${s}.keys k on k.key = v.key and k.state = 'uncertain' and k.fence = v.fence
    where v.state = 'pending' group by v.key order by pg_catalog.min(v.id) limit $1`,
};

/** PgStore's pending verdicts (waiting for a worker's check) ({@link PendingVerdictStore}). */
export class PgPendingVerdicts implements PendingVerdictStore {
  readonly #limits: Limits;
  readonly #rows: StatementRunner<keyof typeof VERDICT_SQL>;

  constructor(pool: pg.Pool, schema: string, limits: Limits, named: boolean) {
    this.#limits = limits;
    this.#rows = statementRunner(pool, statements(schema, VERDICT_SQL, { named }));
  }

  async addPendingVerdict(key: Key, resolution: Resolution): Promise<PendingVerdictOutcome> {
    const { verdict, values } = verdictValues(key, resolution, this.#limits);
    const row = await this.#one<VerdictRow & { o_id: string | null }>('hold', values);
    switch (row.o_outcome) {
      case 'held': {
        const verdict = await this.#pendingVerdict(int(row.o_id));
        if (!verdict) throw new UnexpectedStoreAnswerError('pending verdict vanished');
        return { outcome: 'held', verdict };
      }
      case 'full':
        throw new PendingVerdictsFullError(key, int(row.o_fence));
      default:
        return verdictRefusal(key, verdict.fence, row);
    }
  }

  async pendingVerdicts(key: Key, page?: PendingVerdictPage): Promise<PendingVerdict[]> {
    const { afterId, limit, waiting } = checkPendingPage(page);
    if (!storableKey(key, this.#limits)) return [];
    const rows = await this.#rows<PendingRow>('pendingVerdicts', [key, afterId, limit, waiting]);
    return rows.map(toPending);
  }

  async pendingVerdictCounts(keys: Key[]): Promise<Map<Key, number>> {
    const storable = keys.filter((key) => storableKey(key, this.#limits));
    if (storable.length === 0) return new Map();
    const rows = await this.#rows<{ key: string; n: string }>('pendingVerdictCounts', [storable]);
    return new Map(rows.map((row) => [row.key, int(row.n)]));
  }

  async withdrawPendingVerdict(
    key: Key,
    id: number,
    withdrawal: Withdrawal,
  ): Promise<{ withdrawn: boolean; verdict: PendingVerdict } | undefined> {
    const { reason, by, identity } = checkWithdrawal(withdrawal, this.#limits);
    if (!Number.isSafeInteger(id) || id < 1 || !storableKey(key, this.#limits)) return undefined;
    const row = await this.#one<{ o_state: string | null; o_withdrawn: boolean }>('withdraw', [
      id,
      key,
      reason,
      by ?? 'withdraw',
      identity ?? null,
    ]);
    if (row.o_state === null) return undefined;
    const verdict = await this.#pendingVerdict(id);
    return verdict && { withdrawn: row.o_withdrawn, verdict };
  }

  async pendingVerdictKeys(limit: number): Promise<Key[]> {
    if (!Number.isSafeInteger(limit) || limit < 0)
      throw new InvalidActionError('limit', `must be a non-negative integer, got ${String(limit)}`);
    return (await this.#rows<{ key: string }>('pendingVerdictKeys', [limit])).map((r) => r.key);
  }

  async judgeVerdict(id: number, judgement: VerdictJudgement): Promise<PendingVerdict | undefined> {
    if (!Number.isSafeInteger(id) || id < 1) return undefined;
    const why = judgement.accept ? null : checkReason(judgement.why, this.#limits);
    const row = await this.#one<{ o_state: string | null }>('judge', [id, judgement.accept, why]);
    if (row.o_state === null) return undefined;
    return this.#pendingVerdict(id);
  }

  async #pendingVerdict(id: number): Promise<PendingVerdict | undefined> {
    const [row] = await this.#rows<PendingRow>('pendingVerdict', [id]);
    return row && toPending(row);
  }

  async #one<R extends pg.QueryResultRow>(
    operation: keyof typeof VERDICT_SQL,
    values: unknown[],
  ): Promise<R> {
    const rows = await this.#rows<R>(operation, values);
    return rows[0]!;
  }
}

interface PendingRow {
  id: string;
  key: string;
  fence: string;
  applied: boolean;
  result: Buffer | null;
  reason: string;
  actor: string;
  identity: string | null;
  state: PendingVerdictState;
  why: string | null;
  at_ms: string;
  judged_at_ms: string | null;
}

function toPending(row: PendingRow): PendingVerdict {
  return {
    id: int(row.id),
    key: row.key,
    fence: int(row.fence),
    applied: row.applied,
    ...(row.result === null ? {} : { result: { payload: plainBytes(row.result) } }),
    reason: maskConnectionString(row.reason),
    by: row.actor,
    ...(row.identity === null ? {} : { identity: row.identity }),
    state: row.state,
    ...(row.why === null ? {} : { why: maskConnectionString(row.why) }),
    at: int(row.at_ms),
    ...(row.judged_at_ms === null ? {} : { judgedAt: int(row.judged_at_ms) }),
  };
}

/** What resolve_uncertain() and hold_verdict() answer alike. */
export interface VerdictRow {
  o_outcome: string;
  o_result: Buffer | null;
  o_state: string | null;
  o_fence: string | null;
}

/**
 * A verdict checked (nothing is sent for bad input) and laid out as resolve_uncertain() and
 * hold_verdict() both take it, with its result as sent.
 */
export function verdictValues(
  key: Key,
  resolution: Resolution,
  limits: Limits,
): { verdict: Resolution; result: Buffer | undefined; values: unknown[] } {
  checkText('key', key, limits.maxKeyBytes);
  const verdict = checkResolution(resolution, limits);
  const result = verdict.result && asBuffer(verdict.result.payload);
  const values = [
    key,
    verdict.applied,
    result ?? null,
    verdict.reason,
    verdict.by ?? 'resolve',
    verdict.fence ?? null,
    verdict.identity ?? null,
  ];
  return { verdict, result, values };
}

/**
 * The answers a verdict gets when it decides nothing, alike for resolve_uncertain() and
 * hold_verdict(): the key was already done, is not uncertain, or another attempt is.
 */
export function verdictRefusal(
  key: Key,
  fence: number | undefined,
  row: VerdictRow,
): { outcome: 'replayed'; applied: true; result: Result } {
  switch (row.o_outcome) {
    case 'replayed':
      return { outcome: 'replayed', applied: true, result: { payload: plainBytes(row.o_result!) } };
    case 'not_uncertain':
      throw new NotUncertainError(key, row.o_state ?? 'unknown');
    case 'stale':
      throw new StaleVerdictError(key, fence!, int(row.o_fence), row.o_state ?? 'unknown');
    default:
      throw new UnexpectedStoreAnswerError(row.o_outcome);
  }
}
