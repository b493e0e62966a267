/**
 * The demo's one side effect: charging a card at a "bank" (a Postgres table
 * behind a PgFencedSink, so a stale holder's late charge is refused).
 */
import { Context } from '@temporalio/activity';
import type pg from 'pg';
import { defineEffect } from '../src/activities/index.js';
import type { PgFencedSink } from '../src/store/postgres/index.js';

export interface ChargeInput {
  order: string;
  card: string;
  cents: number;
  /** How long the bank takes, so two orders on one card overlap. */
  bankDelayMs?: number;
  /** The bank takes the charge, then the response is lost on the way back. */
  loseResponse?: boolean;
}

export interface Charge {
  chargeId: string;
  /** The activity attempt that applied it: above 1 means earlier attempts were turned away (contended). */
  attempt: number;
}

export function chargeEffect(bank: PgFencedSink, table: string) {
  return defineEffect<ChargeInput, Charge>({
    resource: (input) => `card:${input.card}`,
    retrySafety: 'unknown',
    async apply(input, { key, lease, signal }) {
      if (input.bankDelayMs) await sleep(input.bankDelayMs, signal);
      const chargeId = await bank.writeFenced(
        `card:${input.card}`,
        lease.fence,
        async (tx: pg.PoolClient) => {
          const { rows } = await tx.query<{ id: string }>(
            `insert into ${table} (key, card, cents, fence) values ($1, $2, $3, $4) returning 'ch_' || id as id`,
            [key, input.card, input.cents, lease.fence],
          );
          return rows[0]!.id;
        },
      );
      if (input.loseResponse)
        throw new Error('bank gateway timeout: the charge may or may not have gone through');
      return { chargeId, attempt: Context.current().info.attempt };
    },
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      reject(signal.reason);
    });
  });
}
