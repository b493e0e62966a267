import type pg from 'pg';
import {
  type BreakerAdmission,
  type BreakerAnswer,
  type BreakerCommand,
  type BreakerOutcome,
  type BreakerPolicy,
  type BreakerRecord,
  type BreakerState,
  type BreakerStore,
  type BreakerTransition,
  checkBreakerAttempt,
  checkBreakerCommand,
  checkBreakerGroup,
  checkBreakerPolicy,
} from '../../core/breaker.js';
import { UnexpectedStoreAnswerError } from '../../core/errors.js';
import type { Fence, Key } from '../../core/types.js';
import { checkText, type Limits } from '../../core/validate.js';
import { type StatementRunner, statementRunner } from './session.js';
import { int, statements } from './sql.js';

/** The breaker statements (migration 0021): one function call each, no session state. */
const BREAKER_SQL = {
  admit: (s: string) => `select * from ${s}.breaker_admit($1, $2, $3)`,
  record: (s: string) => `select * from ${s}.breaker_record($1, $2, $3, $4, $5, $6, $7, $8)`,
  set: (s: string) => `select * from ${s}.breaker_set($1, $2, $3, $4, $5)`,
  one: (s: string) => `select * from ${s}.breaker_answer($1)`,
  list: (s: string) => `select * from ${s}.breaker_list()`,
  history: (s: string) => `select * from ${s}.breaker_history($1)`,
};

/** A breaker function's record columns. */
interface RecordRow {
  o_group: string | null;
  o_state: string | null;
  o_since_ms: string | null;
  o_reason: string | null;
  o_by: string | null;
  o_identity: string | null;
  o_manual: boolean | null;
  o_uncertain: string | null;
  o_until_ms: string | null;
  o_cool_ms: string | null;
  o_probe_key: string | null;
}

interface AnswerRow extends RecordRow {
  o_from: string | null;
}

interface AdmitRow extends AnswerRow {
  o_admitted: boolean;
  o_probe: boolean;
  o_retry_at_ms: string | null;
  o_retry_after_ms: string | null;
}

/** PgStore's breakers ({@link BreakerStore}): the state in the store, judged by its clock. */
export class PgBreakers implements BreakerStore {
  readonly #rows: StatementRunner<keyof typeof BREAKER_SQL>;
  readonly #limits: Limits;

  constructor(pool: pg.Pool, schema: string, limits: Limits, named: boolean) {
    this.#limits = limits;
    this.#rows = statementRunner(pool, statements(schema, BREAKER_SQL, { named }));
  }

  async admitAttempt(policy: BreakerPolicy, key: Key): Promise<BreakerAdmission> {
    const { group, coolDownMs } = checkBreakerPolicy(policy);
    checkText('key', key, this.#limits.maxKeyBytes);
    const row = (await this.#rows<AdmitRow>('admit', [group, key, coolDownMs]))[0]!;
    const transition = transitionOf(row);
    if (row.o_admitted) {
      return {
        admitted: true,
        probe: row.o_probe,
        ...(row.o_state === null ? {} : { record: recordOf(row) }),
        ...(transition ? { transition } : {}),
      };
    }
    return {
      admitted: false,
      record: recordOf(row),
      retryAt: int(row.o_retry_at_ms),
      retryAfterMs: int(row.o_retry_after_ms),
      ...(transition ? { transition } : {}),
    };
  }

  async recordOutcome(
    policy: BreakerPolicy,
    attempt: { key: Key; fence: Fence; outcome: BreakerOutcome },
  ): Promise<BreakerAnswer> {
    const p = checkBreakerPolicy(policy);
    const { key, fence, outcome } = checkBreakerAttempt(attempt, this.#limits.maxKeyBytes);
    const values = [
      p.group,
      key,
      fence,
      outcome,
      p.threshold,
      p.windowMs,
      p.coolDownMs,
      p.maxCoolDownMs,
    ];
    return answerOf((await this.#rows<AnswerRow>('record', values))[0]!);
  }

  async setBreaker(group: string, command: BreakerCommand): Promise<BreakerAnswer> {
    const g = checkBreakerGroup(group);
    const { state, reason, by, identity } = checkBreakerCommand(command);
    const values = [g, state === 'open', reason, by, identity ?? null];
    return answerOf((await this.#rows<AnswerRow>('set', values))[0]!);
  }

  async breaker(group: string): Promise<BreakerRecord | undefined> {
    const row = (await this.#rows<RecordRow>('one', [checkBreakerGroup(group)]))[0];
    return row?.o_group == null ? undefined : recordOf(row);
  }

  async breakers(): Promise<BreakerRecord[]> {
    return (await this.#rows<RecordRow>('list', [])).map(recordOf);
  }

  async breakerEvents(group: string): Promise<BreakerTransition[]> {
    const g = checkBreakerGroup(group);
    const rows = await this.#rows<{
      o_from: string;
      o_to: string;
      o_reason: string;
      o_by: string;
      o_identity: string | null;
      o_at_ms: string;
    }>('history', [g]);
    return rows.map((row) => ({
      group: g,
      from: stateOf(row.o_from),
      to: stateOf(row.o_to),
      reason: row.o_reason,
      by: row.o_by,
      ...(row.o_identity === null ? {} : { identity: row.o_identity }),
      at: int(row.o_at_ms),
    }));
  }
}

function stateOf(state: string | null): BreakerState {
  if (state === 'closed' || state === 'open' || state === 'half-open') return state;
  throw new UnexpectedStoreAnswerError(`breaker state ${String(state)}`);
}

function recordOf(row: RecordRow): BreakerRecord {
  if (row.o_group === null) throw new UnexpectedStoreAnswerError('breaker without a group');
  return {
    group: row.o_group,
    state: stateOf(row.o_state),
    since: int(row.o_since_ms),
    reason: row.o_reason ?? '',
    by: row.o_by ?? '',
    ...(row.o_identity === null ? {} : { identity: row.o_identity }),
    manual: row.o_manual === true,
    uncertainInWindow: int(row.o_uncertain),
    ...(row.o_until_ms === null ? {} : { nextHalfOpenAt: int(row.o_until_ms) }),
    coolDownMs: int(row.o_cool_ms),
    ...(row.o_probe_key === null ? {} : { probeKey: row.o_probe_key }),
  };
}

/** The transition a call made: the record's state, entered now, from `o_from`. */
function transitionOf(row: AnswerRow): BreakerTransition | undefined {
  if (row.o_from === null) return undefined;
  const record = recordOf(row);
  return {
    group: record.group,
    from: stateOf(row.o_from),
    to: record.state,
    reason: record.reason,
    by: record.by,
    ...(record.identity === undefined ? {} : { identity: record.identity }),
    at: record.since,
  };
}

function answerOf(row: AnswerRow): BreakerAnswer {
  const transition = transitionOf(row);
  return { record: recordOf(row), ...(transition ? { transition } : {}) };
}
