/**
 * PgStore at scale (`npm run bench:scale`, not part of `npm test` or `npm run bench`; about 10
 * minutes on 2 cores):
 *
 * 1. acquire (a new key, straight into applying) and replay (acquire of a done key) latency,
 *    p50 and p99 from 8 concurrent callers, on a store holding 10,000 done keys and on one
 *    holding 1,000,000 (each as a successful execute leaves it), measured in alternating rounds
 *    so a change in machine load hits both alike. Target: at 1M within 1.3x of at 10k.
 * 2. table and index sizes of keys and events, per million keys.
 * 3. purge of the 1,000,000 done keys, in batches, beside 8 callers executing new keys: the
 *    purge finishes and the callers keep >= 0.7x of their throughput without it.
 *
 * Prints every figure with its target and met/MISSED; never fails on time.
 * Run: npm run bench:scale   (DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test)
 */
import { randomBytes } from 'node:crypto';
import { cpus, loadavg } from 'node:os';
import pg from 'pg';
import { Runner } from '../../src/core/index.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';

const DATABASE_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
const SMALL = 10_000;
const LARGE = Number(process.env.SCALE_KEYS) || 1_000_000;
const CALLERS = 8;
const MEASURE_MS = 2_500;
const ROUNDS = 4;
const BASELINE_MS = 10_000;
const FILL_CHUNK = 100_000;
const FILL_RESOURCES = 1_000;
const TARGETS = { latency: 1.3, purgeThroughput: 0.7 } as const;
/** sha-256 of the empty payload: the digest every filled key is bound to. */
const EMPTY_DIGEST = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

const tag = randomBytes(3).toString('hex');
const schema = `sideeffect_scale_${tag}`;
const smallSchema = `sideeffect_scale_small_${tag}`;
const q = `"${schema}"`;
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: CALLERS + 2 });
pool.on('error', () => {});
const store = new PgStore({ pool, schema });
const smallStore = new PgStore({ pool, schema: smallSchema });
const runner = new Runner(store, { ttlMs: 30_000 });
const result = { payload: new TextEncoder().encode('ok') };
const started = performance.now();
const elapsed = () => `${((performance.now() - started) / 1000).toFixed(0)} s`;
const log = (line: string) => console.log(`[${elapsed()}] ${line}`);

/**
 * Done keys `fill/<from..to>`, two days old, in chunks of FILL_CHUNK, each as a successful execute
 * leaves it: its grant and completion recorded on the row (migration 0006), no rows in `events`.
 */
async function fill(q: string, from: number, to: number): Promise<void> {
  for (let lo = from; lo <= to; lo += FILL_CHUNK) {
    const hi = Math.min(to, lo + FILL_CHUNK - 1);
    await pool.query(
      `insert into ${q}.keys (key, resource, digest, state, fence, retry_safety, result, updated_at,
                              granted_at, granted_state, granted_fence, completed_from)
       select 'fill/' || i, 'fill-r/' || (i % ${FILL_RESOURCES}), decode('${EMPTY_DIGEST}', 'hex'),
              'done', i, 'unknown', '\\x6f6b'::bytea, now() - interval '2 days',
              now() - interval '2 days', 'applying', i, 'applying'
         from generate_series($1::int, $2::int) i`,
      [lo, hi],
    );
  }
  // What autovacuum does to a table that grew: fresh statistics and visibility map.
  await pool.query(`vacuum analyze ${q}.keys, ${q}.events, ${q}.resources`);
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Runs `op` from CALLERS callers for `ms`; returns each call's latency (ms) and the ops/s. */
async function callers(
  ms: number,
  op: (caller: number, n: number) => Promise<void>,
  until?: Promise<unknown>,
): Promise<{ latencies: number[]; rate: number }> {
  const latencies: number[] = [];
  let stop = false;
  const timer = setTimeout(() => {
    stop = true;
  }, ms);
  void until?.then(() => {
    stop = true;
  });
  const begin = performance.now();
  await Promise.all(
    Array.from({ length: CALLERS }, async (_, caller) => {
      for (let n = 0; !stop; n++) {
        const t0 = performance.now();
        await op(caller, n);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  clearTimeout(timer);
  return { latencies, rate: (latencies.length / (performance.now() - begin)) * 1000 };
}

let round = 0;
/** Latencies of the acquire alone (each is followed by an untimed complete that frees the resource). */
const acquireOnly: number[] = [];
/** acquire and replay latencies (ms) on `store`, which holds `filled` done keys. */
async function latencies(store: PgStore, filled: number) {
  round += 1;
  const tag = `${round}`;
  await callers(MEASURE_MS, async (caller, n) => {
    const action = { key: `new/${tag}/${caller}/${n}`, resource: `live/${caller}` };
    const t0 = performance.now();
    const granted = await store.acquire(action, 30_000, { applying: true });
    const took = performance.now() - t0;
    if (granted.outcome !== 'granted') throw new Error(`expected applied, got ${granted.outcome}`);
    await store.complete(action, granted.lease, result);
    acquireOnly.push(took);
  });
  const acquired = acquireOnly.splice(0);
  const replay = await callers(MEASURE_MS, async () => {
    const i = 1 + Math.floor(Math.random() * filled);
    const got = await store.acquire(
      { key: `fill/${i}`, resource: `fill-r/${i % FILL_RESOURCES}` },
      30_000,
    );
    if (got.outcome !== 'replayed') throw new Error(`expected replayed, got ${got.outcome}`);
  });
  return { acquire: acquired, replay: replay.latencies };
}

/** Percentiles of the latencies gathered over every round. */
function summary(samples: { acquire: number[]; replay: number[] }) {
  const of = (values: number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    return { p50: percentile(sorted, 50), p99: percentile(sorted, 99), n: sorted.length };
  };
  return { acquire: of(samples.acquire), replay: of(samples.replay) };
}
async function sizes() {
  const { rows } = await pool.query<{
    keys: string;
    keys_heap: string;
    keys_indexes: string;
    events_heap: string;
    events_indexes: string;
  }>(
    `select (select count(*) from ${q}.keys) as keys,
       pg_table_size('${q}.keys') as keys_heap, pg_indexes_size('${q}.keys') as keys_indexes,
       pg_table_size('${q}.events') as events_heap, pg_indexes_size('${q}.events') as events_indexes`,
  );
  return rows[0]!;
}

/**
 * What a purge with a one-day horizon left, in one scan: every key, and the done keys older than
 * the horizon (this run's own keys are younger; any old done key still here is one purge missed).
 */
async function leftAfterPurge() {
  const { rows } = await pool.query<{ keys: string; old_done: string }>(
    `select count(*) as keys,
       count(*) filter (where state = 'done'
                          and updated_at < ${q}.store_now() - interval '1 day') as old_done
     from ${q}.keys`,
  );
  return rows[0]!;
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MB`;

async function main(): Promise<void> {
  log(
    `PgStore scale bench, schema ${schema}; ${cpus().length} cores (${cpus()[0]?.model}), load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  await migrate(pool, { schema });
  await migrate(pool, { schema: smallSchema });
  await fill(`"${smallSchema}"`, 1, SMALL);
  await fill(q, 1, LARGE);
  log(`filled ${SMALL} and ${LARGE} keys`);
  // Warm every connection's prepared statements and plpgsql plans.
  await latencies(smallStore, SMALL);
  await latencies(store, LARGE);
  const samples = { small: { acquire: [] as number[], replay: [] as number[] } };
  const largeSamples = { acquire: [] as number[], replay: [] as number[] };
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? ['small', 'large'] : ['large', 'small'];
    for (const which of order) {
      const got =
        which === 'small' ? await latencies(smallStore, SMALL) : await latencies(store, LARGE);
      const into = which === 'small' ? samples.small : largeSamples;
      into.acquire.push(...got.acquire);
      into.replay.push(...got.replay);
    }
  }
  const small = summary(samples.small);
  const large = summary(largeSamples);
  log(`at ${SMALL} keys: ${JSON.stringify(small)}`);
  log(`at ${LARGE} keys: ${JSON.stringify(large)}`);
  const size = await sizes();

  const execute = (tag: string) => async (caller: number, n: number) => {
    const execution = await runner.execute(
      { key: `exec/${tag}/${caller}/${n}`, resource: `exec/${caller}` },
      async () => result,
    );
    if (execution.outcome !== 'applied')
      throw new Error(`expected applied, got ${execution.outcome}`);
  };
  const baseline = await callers(BASELINE_MS, execute('baseline'));
  log(`baseline: ${baseline.rate.toFixed(0)} executes/s`);
  const purgeStarted = performance.now();
  const purging = store.purge({ olderThanMs: 86_400_000, force: true });
  const during = await callers(60 * 60_000, execute('purge'), purging);
  const purged = await purging;
  const purgeMs = performance.now() - purgeStarted;
  log(
    `purged ${purged} keys in ${(purgeMs / 1000).toFixed(1)} s; callers ${during.rate.toFixed(0)}/s`,
  );
  const after = await leftAfterPurge();

  console.log(
    `\nPgStore at scale (schema ${schema}), ${CALLERS} callers, ${MEASURE_MS} ms per figure`,
  );
  console.log(
    `load average at the end: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  let missed = 0;
  for (const op of ['acquire', 'replay'] as const) {
    for (const p of ['p50', 'p99'] as const) {
      const ratio = large[op][p] / small[op][p];
      const met = ratio <= TARGETS.latency;
      if (!met) missed++;
      console.log(
        `${op.padEnd(8)} ${p}  ${SMALL} keys ${small[op][p].toFixed(2).padStart(7)} ms  ${LARGE} keys ${large[op][p].toFixed(2).padStart(7)} ms  ratio ${ratio.toFixed(2)}  target <= ${TARGETS.latency}  ${met ? 'met' : 'MISSED'}`,
      );
    }
  }
  const perMillion = (bytes: string) => mb((Number(bytes) / Number(size.keys)) * 1_000_000);
  console.log(
    `sizes per million keys (${size.keys} keys): keys table ${perMillion(size.keys_heap)} + indexes ${perMillion(size.keys_indexes)}, events table ${perMillion(size.events_heap)} + indexes ${perMillion(size.events_indexes)}`,
  );
  const ratio = during.rate / baseline.rate;
  const met = ratio >= TARGETS.purgeThroughput;
  if (!met) missed++;
  console.log(
    `purge of ${purged} done keys in batches of 5000: ${(purgeMs / 1000).toFixed(1)} s (${((purged / purgeMs) * 1000).toFixed(0)} keys/s); callers ${during.rate.toFixed(0)}/s during vs ${baseline.rate.toFixed(0)}/s without: ratio ${ratio.toFixed(2)}  target >= ${TARGETS.purgeThroughput}  ${met ? 'met' : 'MISSED'}`,
  );
  console.log(
    `left after purge: ${after.keys} keys; done keys older than the one-day horizon among them: ${after.old_done} (the rest are this run's own, younger)`,
  );
  if (Number(after.old_done) !== 0) missed++;
  console.log(missed === 0 ? 'all targets met' : `${missed} target(s) missed`);
  log('done');
}

try {
  await main();
} finally {
  await pool.query(`drop schema if exists ${q} cascade`).catch(() => {});
  await pool.query(`drop schema if exists "${smallSchema}" cascade`).catch(() => {});
  await pool.end();
}
