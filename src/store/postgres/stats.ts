import type pg from 'pg';
import type { KeyState, UncertainBacklog } from '../../core/types.js';
import { uncertainBacklog } from './key-statements.js';
import { defaultSchema, int, quoteSchema } from './sql.js';

/** One group of resolved uncertain attempts: who recorded the verdict, which verdict, how long it took. */
interface ResolutionStats {
  /** Who recorded the verdict (`by`, stored in the `actor` column): a person, `probe:<effect>`, `cli:<user>`... */
  by: string;
  /** `probe`, `cli` or `person`, read from the shape of `by`. */
  kind: 'probe' | 'cli' | 'person';
  verdict: 'applied' | 'not_applied';
  count: number;
  /** Seconds from the key becoming uncertain to this verdict. */
  medianSeconds: number;
  maxSeconds: number;
}

/**
 * What the store knows about doubtful keys, for `sideeffect stats`: the same
 * questions the worker's metrics answer (how many wait, since when, who
 * decides, how fast), answered from the event log, so they survive restarts
 * and cover verdicts recorded while no worker ran.
 */
export interface StoreStats {
  keys: Record<KeyState, number>;
  backlog: UncertainBacklog;
  /** Attempts that became uncertain (a key re-applied after a "not applied" verdict counts again). */
  uncertainAttempts: number;
  resolutions: ResolutionStats[];
  /** Over every resolution: from uncertain to verdict. */
  timeToResolution: {
    count: number;
    medianSeconds: number;
    p95Seconds: number;
    maxSeconds: number;
  };
}

/** An event that moves a key into or out of `uncertain` (not one that leaves it there). */
const MOVES_UNCERTAIN = `(to_state = 'uncertain' or from_state = 'uncertain') and from_state is distinct from to_state`;

/**
 * Reads StoreStats from a migrated schema in one read-only transaction (one consistent snapshot).
 * Every function and operator named is pg_catalog's or the store's, so another role's objects on
 * the caller's search_path never run.
 */
export async function storeStats(
  pool: pg.Pool,
  options: { schema?: string } = {},
): Promise<StoreStats> {
  const s = quoteSchema(options.schema ?? defaultSchema());
  // Every uncertain attempt: the event that entered `uncertain`, then the one that left it. Notes
  // on a key that stays uncertain (a pending verdict, a refused one, a withdrawal) are neither:
  // counted, they made 8 attempts read 11 and listed one person's verdicts twice.
  const attempts = `with marks as (
      select to_state, from_state, actor, at, pg_catalog.lag(at) over (partition by key order by id) as since
        from ${s}.events where ${MOVES_UNCERTAIN}
    ), closed as (
      select actor, to_state, extract(epoch from at operator(pg_catalog.-) since)::double precision as seconds
        from marks where from_state = 'uncertain' and since is not null
    )`;
  const client = await pool.connect();
  try {
    await client.query('begin isolation level repeatable read read only');
    const states = await client.query<{ state: KeyState; n: string }>(
      `select state, pg_catalog.count(*) as n from ${s}.keys group by state`,
    );
    const backlog = await client.query<{ count: string; oldest_age_ms: string }>(
      uncertainBacklog(s),
    );
    const opened = await client.query<{ n: string }>(
      `select pg_catalog.count(*) as n from ${s}.events
        where to_state = 'uncertain' and from_state is distinct from 'uncertain'`,
    );
    const groups = await client.query<{
      actor: string;
      to_state: string;
      n: string;
      median: number;
      max: number;
    }>(
      `${attempts} select actor, to_state, pg_catalog.count(*) as n,
         pg_catalog.percentile_cont(0.5::double precision) within group (order by seconds) as median,
         pg_catalog.max(seconds) as max
       from closed group by actor, to_state order by n desc, actor`,
    );
    const overall = await client.query<{ n: string; median: number; p95: number; max: number }>(
      `${attempts} select pg_catalog.count(*) as n,
         coalesce(pg_catalog.percentile_cont(0.5::double precision) within group (order by seconds), 0) as median,
         coalesce(pg_catalog.percentile_cont(0.95::double precision) within group (order by seconds), 0) as p95,
         coalesce(pg_catalog.max(seconds), 0) as max
       from closed`,
    );
    await client.query('commit');
    const keys: Record<KeyState, number> = { free: 0, held: 0, applying: 0, done: 0, uncertain: 0 };
    for (const row of states.rows) keys[row.state] = int(row.n);
    const totals = overall.rows[0]!;
    return {
      keys,
      backlog: {
        count: int(backlog.rows[0]!.count),
        oldestAgeMs: Math.max(0, int(backlog.rows[0]!.oldest_age_ms)),
      },
      uncertainAttempts: int(opened.rows[0]!.n),
      resolutions: groups.rows.map((row) => ({
        by: row.actor,
        kind: kindOf(row.actor),
        verdict: row.to_state === 'done' ? 'applied' : 'not_applied',
        count: int(row.n),
        medianSeconds: row.median,
        maxSeconds: row.max,
      })),
      timeToResolution: {
        count: int(totals.n),
        medianSeconds: totals.median,
        p95Seconds: totals.p95,
        maxSeconds: totals.max,
      },
    };
  } catch (error) {
    await client.query('rollback').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

function kindOf(by: string): ResolutionStats['kind'] {
  if (by.startsWith('probe:')) return 'probe';
  if (by === 'cli' || by.startsWith('cli:')) return 'cli';
  return 'person';
}
