import type pg from 'pg';
import {
  InvalidActionError,
  NotUncertainError,
  StaleVerdictError,
  UnexpectedStoreAnswerError,
} from '../../core/errors.js';
import { maskConnectionString } from '../../core/mask.js';
import type { PendingVerdictStore } from '../../core/store.js';
import type { Key, Result } from '../../core/types.js';
import {
  checkReason,
  checkResolution,
  checkText,
  type Limits,
  storableKey,
} from '../../core/validate.js';
import type {
  PendingVerdict,
  PendingVerdictOutcome,
  PendingVerdictState,
  Resolution,
  VerdictJudgement,
} from '../../core/verdict.js';
import { type StatementRunner, statementRunner } from './session.js';
import { asBuffer, int, plainBytes, statements } from './sql.js';

/** The columns of a pending verdict as {@link PendingRow} reads them. */
const pendingColumns = (s: string) =>
  `id, key, fence, applied, result, reason, actor, identity, state, why, ${s}.epoch_ms(at) as at_ms, ${s}.epoch_ms(judged_at) as judged_at_ms`;

/** The statements of pending verdicts (waiting for a worker's check) (0010 and after). */
const VERDICT_SQL = {
  hold: (s: string) => `select * from ${s}.hold_verdict($1, $2, $3, $4, $5, $6, $7)`,
  judge: (s: string) => `select * from ${s}.judge_verdict($1, $2, $3)`,
  pendingVerdicts: (s: string) => `select ${pendingColumns(s)} from ${s}.pending_verdicts
    where key = $1 order by id`,
  pendingVerdict: (s: string) =>
    `select ${pendingColumns(s)} from ${s}.pending_verdicts where id = $1`,
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
      default:
        return verdictRefusal(key, verdict.fence, row);
    }
  }

  async pendingVerdicts(key: Key): Promise<PendingVerdict[]> {
    if (!storableKey(key, this.#limits)) return [];
    return (await this.#rows<PendingRow>('pendingVerdicts', [key])).map(toPending);
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
