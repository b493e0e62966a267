/**
 * The fault harness's downstream and its two guarded effects, shared by the worker processes and
 * the checker. The downstream is a `ledger` table written through a PgFencedSink: every accepted
 * write is one row with the key, the fence it was written with, the writer's pid and the value,
 * in commit order per resource (`seq`: the sink's fence row lock serializes one resource's writes,
 * so identity order is commit order there).
 */
import { Context } from '@temporalio/activity';
import type pg from 'pg';
import { defineEffect } from '../../src/activities/index.js';
import { FenceStaleError } from '../../src/core/errors.js';
import type { Store } from '../../src/core/store.js';
import type { PgFencedSink } from '../../src/store/postgres/index.js';

export const LEDGER_DDL = `
create table ledger (
  seq bigint generated always as identity primary key,
  key text not null,
  resource text not null,
  fence bigint not null,
  writer int not null,
  value int not null,
  safe boolean not null,
  at timestamptz not null default clock_timestamp()
);
create index ledger_key on ledger (key);
create index ledger_resource on ledger (resource, seq);`;

/** One guarded call's input; it is also the payload the key is bound to. */
export interface PostInput {
  resource: string;
  value: number;
  /** Inside apply, before the downstream write: where a kill or a pause lands mid-apply. */
  delayMs: number;
  /** After the write, before apply returns: a kill here leaves a write the store never recorded. */
  afterMs: number;
  /** The write lands, then apply throws (first attempt only): the response is lost on the way back. */
  loseResponse: boolean;
  /** false: the probe says it cannot tell, so an operator (the driver) resolves by signal. */
  probe: boolean;
}

/** What apply returns (and the store records): the ledger row it wrote. */
export interface PostResult {
  seq: number;
  value: number;
  fence: number;
}

export type EffectName = 'post' | 'postSafe';

/** What a worker reports on stdout, one line each; the parent counts and injects faults on them. */
export type Announce = (line: string) => void;

export interface LedgerRow {
  seq: number;
  key: string;
  resource: string;
  fence: number;
  writer: number;
  value: number;
  safe: boolean;
}

/**
 * Reads the key's ledger rows *after fencing off its earlier holders* with the sink's
 * `readFenced`: the mark for the resource is raised to (the key's last fence + 1, the fence a
 * probe is given) in the same transaction, which waits for a write in flight to commit and
 * refuses any later write with that fence or an older one. A plain read is not a sound probe
 * while the holder that lost its lease may be paused: "not applied" read before its late write
 * lands, then the re-run's write, is a duplicate. `fenced: false` reads plainly, to show that
 * (probe-race.ts).
 */
export async function readLedger(
  pool: pg.Pool,
  sink: PgFencedSink,
  store: Store,
  key: string,
  resource: string,
  fenced: boolean,
  fence?: number,
): Promise<LedgerRow[]> {
  const select = async (client: pg.Pool | pg.PoolClient) =>
    (
      await client.query<LedgerRow>(
        `select seq::int, key, resource, fence::int, writer, value, safe
           from ledger where key = $1 order by seq`,
        [key],
      )
    ).rows;
  if (!fenced) return select(pool);
  const above = fence ?? ((await store.inspect(key))?.fence ?? 0) + 1;
  return sink.readFenced(resource, above, (tx) => select(tx));
}

/** The answer a probe (or an operator) gives from the ledger rows of one key. */
export function verdictFromLedger(
  rows: LedgerRow[],
): { applied: true; result: PostResult } | { applied: false } {
  const row = rows[0];
  return row
    ? { applied: true, result: { seq: row.seq, value: row.value, fence: row.fence } }
    : { applied: false };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * `post` (retrySafety unknown) and `postSafe` (retrySafety safe, the checker allows it several
 * rows). Apply announces `APPLY`, waits `delayMs` (not abortable: a slow downstream call, or a
 * process paused right before its write), writes through the sink, announces `WROTE`, waits
 * `afterMs`, and either returns the row or (loseResponse) throws. A sink refusal is announced as
 * `STALE` and rethrown.
 */
export function faultEffects(options: {
  pool: pg.Pool;
  sink: PgFencedSink;
  store: Store;
  announce: Announce;
  fencedProbe: boolean;
}) {
  const { pool, sink, store, announce, fencedProbe } = options;
  const post = (safe: boolean) =>
    defineEffect<PostInput, PostResult>({
      resource: (input) => input.resource,
      retrySafety: safe ? 'safe' : 'unknown',
      async apply(input, { key, lease }) {
        announce(`APPLY ${key}`);
        if (input.delayMs > 0) await sleep(input.delayMs);
        let row: PostResult;
        try {
          row = await sink.writeFenced(lease.resource, lease.fence, async (tx) => {
            const { rows } = await tx.query<{ seq: number }>(
              `insert into ledger (key, resource, fence, writer, value, safe)
               values ($1, $2, $3, $4, $5, $6) returning seq::int`,
              [key, lease.resource, lease.fence, process.pid, input.value, safe],
            );
            return { seq: rows[0]!.seq, value: input.value, fence: lease.fence };
          });
        } catch (error) {
          if (error instanceof FenceStaleError) announce(`STALE ${key} ${lease.fence}`);
          throw error;
        }
        announce(`WROTE ${key}`);
        if (input.afterMs > 0) await sleep(input.afterMs);
        // Only the first attempt loses its response: a `safe` effect is retried and must get through.
        if (input.loseResponse && Context.current().info.attempt === 1) {
          announce(`LOST ${key}`);
          throw new Error('downstream took the write, then the response was lost');
        }
        return row;
      },
      async probe(input, { key, resource, fence }) {
        if (!input.probe) return undefined;
        return verdictFromLedger(
          await readLedger(pool, sink, store, key, resource, fencedProbe, fence),
        );
      },
    });
  return { post: post(false), postSafe: post(true) };
}
