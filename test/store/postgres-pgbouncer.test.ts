/**
 * PgStore through PgBouncer in transaction pooling mode (as managed Postgres offerings put it in
 * front of the database): consecutive transactions may run on different server connections, so
 * the store must send unnamed statements (`transactionPooling: true`) and keep no session state.
 * The whole conformance suite, unchanged: a cell of the conformance matrix
 * (pg-support/conformance-matrix.ts). The concurrency test runs through it too.
 */
import { afterAll } from 'vitest';
import { describeBreakerConformance } from '../conformance/breaker-conformance.js';
import { describeStoreConformance } from '../conformance/store-conformance.js';
import { type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import { LONG_TIER } from '../support/tier.js';
import { conformanceBatching } from './pg-support/conformance-matrix.js';
import { pgHarness } from './pg-support/harness.js';

let bouncer: Promise<PgBouncer> | undefined;
afterAll(async () => {
  await (await bouncer)?.stop();
});

const batching = conformanceBatching('pgbouncer');
describeStoreConformance(
  `PgStore through PgBouncer (transaction pooling), batching ${batching}`,
  async () => {
    bouncer ??= startPgBouncer({ serverConnections: 4 });
    const { url } = await bouncer;
    return pgHarness('pg_bouncer', { via: { url, transactionPooling: true }, batching });
  },
);
// Breakers (0021): one function call per decision, nothing kept on the session; `npm test` only,
// since the long tier adds nothing to them.
if (!LONG_TIER)
  describeBreakerConformance('PgStore through PgBouncer (transaction pooling)', async () => {
    bouncer ??= startPgBouncer({ serverConnections: 4 });
    const { url } = await bouncer;
    return pgHarness('pg_bouncer_breakers', { via: { url, transactionPooling: true } });
  });
