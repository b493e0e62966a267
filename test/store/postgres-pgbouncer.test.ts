/**
 * PgStore through PgBouncer in transaction pooling mode (as managed Postgres offerings put it in
 * front of the database): consecutive transactions may run on different server connections, so
 * the store must send unnamed statements (`transactionPooling: true`) and keep no session state.
 * The whole conformance suite, unchanged; the concurrency test runs through it too. `npm test`
 * runs it with every call through the batch statements; the long tier adds one statement per
 * call (the path a lone call takes), which postgres.test.ts covers without the pooler.
 */
import { afterAll } from 'vitest';
import { describeBreakerConformance } from '../conformance/breaker-conformance.js';
import { describeStoreConformance } from '../conformance/store-conformance.js';
import type { BatchingMode } from '../support/batching.js';
import { type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import { sized } from '../support/tier.js';
import { pgHarness } from './pg-support/harness.js';

let bouncer: Promise<PgBouncer> | undefined;
afterAll(async () => {
  await (await bouncer)?.stop();
});

const modes: BatchingMode[] = sized(['every call'], ['every call', 'off']);
for (const batching of modes) {
  describeStoreConformance(
    `PgStore through PgBouncer (transaction pooling), batching ${batching}`,
    async () => {
      bouncer ??= startPgBouncer({ serverConnections: 4 });
      const { url } = await bouncer;
      return pgHarness('pg_bouncer', { via: { url, transactionPooling: true }, batching });
    },
  );
}
// Breakers (0021): one function call per decision, nothing kept on the session.
describeBreakerConformance('PgStore through PgBouncer (transaction pooling)', async () => {
  bouncer ??= startPgBouncer({ serverConnections: 4 });
  const { url } = await bouncer;
  return pgHarness('pg_bouncer_breakers', { via: { url, transactionPooling: true } });
});
