import type pg from 'pg';
import {
  InvalidActionError,
  NotUncertainError,
  StaleVerdictError,
  UnexpectedStoreAnswerError,
} from '../../core/errors.js';
import { maskConnectionString } from '../../core/mask.js';
import type { VerdictHolding } from '../../core/store.js';
import type { Key, Result } from '../../core/types.js';
import {
  checkReason,
  checkResolution,
  checkText,
  type Limits,
  storableKey,
} from '../../core/validate.js';
import type {
  HeldVerdict,
  HeldVerdictState,
  HoldOutcome,
  Resolution,
  VerdictJudgement,
} from '../../core/verdict.js';
import { type StatementRunner, statementRunner } from './session.js';
import { asBuffer, int, plainBytes, statements } from './sql.js';

/** The columns of a held verdict as {@link HeldRow} reads them. */
const heldColumns = (s: string) =>
  `id, key, fence, applied, result, reason, actor, identity, state, why, ${s}.epoch_ms(at) as at_ms, ${s}.epoch_ms(judged_at) as judged_at_ms`;

/** The statements of verdicts held for a worker's check (0010 and after). */
const VERDICT_SQL = {
  hold: (s: string) => `select * from ${s}.hold_verdict($1, $2, $3, $4, $5, $6, $7)`,
  judge: (s: string) => `select * from ${s}.judge_verdict($1, $2, $3)`,
  heldVerdicts: (s: string) => `select ${heldColumns(s)} from ${s}.pending_verdicts
    where key = $1 order by id`,
  heldVerdict: (s: string) => `select ${heldColumns(s)} from ${s}.pending_verdicts where id = $1`,
  pendingVerdictKeys: (s: string) => `select v.key from ${s}.pending_verdicts v
    join ${s}.keys k on k.key = v.key and k.state = 'uncertain' and k.fence = v.fence
    where v.state = 'pending' group by v.key order by pg_catalog.min(v.id) limit $1`,
};

/** PgStore's verdicts held for a worker's check ({@link VerdictHolding}). */
export class HeldVerdicts implements VerdictHolding {
  readonly #limits: Limits;
  readonly #rows: StatementRunner<keyof typeof VERDICT_SQL>;

  constructor(pool: pg.Pool, schema: string, limits: Limits, named: boolean) {
    this.#limits = limits;
    this.#rows = statementRunner(pool, statements(schema, VERDICT_SQL, { named }));
  }

  async holdVerdict(key: Key, resolution: Resolution): Promise<HoldOutcome> {
    const { verdict, values } = verdictValues(key, resolution, this.#limits);
    const row = await this.#one<VerdictRow & { o_id: string | null }>('hold', values);
    switch (row.o_outcome) {
      case 'held': {
        const held = await this.#heldVerdict(int(row.o_id));
        if (!held) throw new UnexpectedStoreAnswerError('held verdict vanished');
        return { outcome: 'held', verdict: held };
      }
      default:
        return verdictRefusal(key, verdict.fence, row);
    }
  }

  async heldVerdicts(key: Key): Promise<HeldVerdict[]> {
    if (!storableKey(key, this.#limits)) return [];
    return (await this.#rows<HeldRow>('heldVerdicts', [key])).map(toHeld);
  }

  async pendingVerdictKeys(limit: number): Promise<Key[]> {
    if (!Number.isSafeInteger(limit) || limit < 0)
      throw new InvalidActionError('limit', `must be a non-negative integer, got ${String(limit)}`);
    return (await this.#rows<{ key: string }>('pendingVerdictKeys', [limit])).map((r) => r.key);
  }

  async judgeVerdict(id: number, judgement: VerdictJudgement): Promise<HeldVerdict | undefined> {
    if (!Number.isSafeInteger(id) || id < 1) return undefined;
    const why = judgement.accept ? null : checkReason(judgement.why, this.#limits);
    const row = await this.#one<{ o_state: string | null }>('judge', [id, judgement.accept, why]);
    if (row.o_state === null) return undefined;
    return this.#heldVerdict(id);
  }

  async #heldVerdict(id: number): Promise<HeldVerdict | undefined> {
    const [row] = await this.#rows<HeldRow>('heldVerdict', [id]);
    return row && toHeld(row);
  }

  async #one<R extends pg.QueryResultRow>(
    operation: keyof typeof VERDICT_SQL,
    values: unknown[],
  ): Promise<R> {
    const rows = await this.#rows<R>(operation, values);
    return rows[0]!;
  }
}

interface HeldRow {
  id: string;
  key: string;
  fence: string;
  applied: boolean;
  result: Buffer | null;
  reason: string;
  actor: string;
  identity: string | null;
  state: HeldVerdictState;
  why: string | null;
  at_ms: string;
  judged_at_ms: string | null;
}

function toHeld(row: HeldRow): HeldVerdict {
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
