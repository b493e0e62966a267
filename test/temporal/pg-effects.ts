/** The effect the crash test runs in two processes: one ledger row per key in Postgres, behind a PgFencedSink. */
import type pg from 'pg';
import { defineEffect } from '../../src/activities/index.js';
import { PgFencedSink } from '../../src/store/postgres/index.js';

export interface Deposit {
  account: string;
  amount: number;
}

export const LEDGER_DDL = `create table ledger (
  id serial primary key,
  key text not null,
  resource text not null,
  fence bigint not null,
  amount int not null
)`;

/** `afterWrite` runs once the row is committed, before apply returns: where the crash test hangs the worker to kill it. */
export function pgEffects(options: {
  pool: pg.Pool;
  schema: string;
  afterWrite?: (key: string) => Promise<void>;
}) {
  const sink = new PgFencedSink({ pool: options.pool, schema: options.schema });
  return {
    deposit: defineEffect({
      resource: (input: Deposit) => `account:${input.account}`,
      apply: async (input: Deposit, { key, lease }) => {
        const entry = await sink.writeFenced(lease.resource, lease.fence, async (tx) => {
          const { rows } = await tx.query<{ id: number }>(
            'insert into ledger (key, resource, fence, amount) values ($1, $2, $3, $4) returning id',
            [key, lease.resource, lease.fence, input.amount],
          );
          return rows[0]!.id;
        });
        await options.afterWrite?.(key);
        return { entry };
      },
      probe: async (_input: Deposit, { key }) => {
        const { rows } = await options.pool.query<{ id: number }>(
          'select id from ledger where key = $1',
          [key],
        );
        return rows[0] ? { applied: true, result: { entry: rows[0].id } } : { applied: false };
      },
    }),
  };
}
