/**
 * What a transactional effect's Postgres CPU is made of (issue 41): one connection, one caller,
 * each variant a transaction that inserts one row, alternating in rounds; the figure is the
 * backend's CPU per transaction (/proc/<pid>/schedstat), median of the rounds, so the load of
 * other processes on the machine changes it little. Each variant adds one part to the one above
 * it, ending at what PgStore sends; `node` is this process's CPU per transaction.
 *
 * - hand-written: the bench's peer (claim the key, the insert, record the result), prepared.
 * - key row only: the insert and a done key row, prepared: what a key-row lease would write.
 * - required writes: + the resource's fence raised and the sink mark raised (the lease and the
 *   fence the work is given), prepared.
 * - + commit check: the transactional key set, so the deferred trigger (0007/0011) looks it up.
 * - + fingerprint twice: tx_session_state() at the start and the end, prepared.
 * - tx_open/tx_finish prepared: PgStore's two functions, each prepared, BEGIN and COMMIT apart.
 * - + simple query: the same writes as PgStore's two simple-query round trips (tx_open and
 *   tx_finish, both parsed and planned per call), without the session reset.
 * - shipped: PgStore's exact open and finish texts (the reset, the fingerprint, the bounds).
 * - the PgStore path, through Runner.executeInTransaction on a one-connection pool.
 * - tx_grant_fresh() as migration 0020 made it (plpgsql) beside its earlier language sql body.
 *
 * Run: npx tsx bench/transactional-ablation.ts   (DATABASE_URL as the store bench)
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import pg from 'pg';
import { Runner } from '../src/core/index.js';
import { transactionalDigest } from '../src/store/digest.js';
import { migrate, PgStore } from '../src/store/postgres/index.js';
import { finishTransaction, openTransaction } from '../src/store/postgres/transaction-sql.js';
import { median } from './support/figures.js';

const DATABASE_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
const ROUNDS = Number(process.env.ABLATION_ROUNDS ?? 7);
const PER_ROUND = Number(process.env.ABLATION_OPS ?? 200);

const micros = (pid: number) =>
  Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1000;

const schema = `sideeffect_ablation_${randomBytes(3).toString('hex')}`;
const q = `"${schema}"`;
const client = new pg.Client({ connectionString: DATABASE_URL });
await client.connect();
const pid = (client as unknown as { processID: number }).processID;
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1, idleTimeoutMillis: 0 });
const store = new PgStore({ pool, schema });
const runner = new Runner(store, { ttlMs: 30_000 });
const result = { payload: new TextEncoder().encode('ok') };
const resultBytes = Buffer.from(result.payload);
const digest = transactionalDigest(new Uint8Array());
let poolPid = 0;
pool.on('connect', (c) => {
  poolPid = (c as unknown as { processID: number }).processID;
});

await migrate(pool, { schema });
await client.query(`create table ${q}.target (key text primary key, amount int not null)`);
await client.query(
  `create table ${q}.idem (key text primary key, state text not null, result bytea)`,
);
await client.query(`insert into ${q}.resources (resource) values ('r')`);
// Migration 0020 made tx_grant_fresh() plpgsql; its body as the language sql function it was.
await client.query(`create function ${q}.tx_grant_fresh_sql(p_key text, p_resource text,
    out o_fence bigint, out o_seen bigint) returns setof record language sql
  set search_path = ${q}, pg_temp as $$
  with granted as (
    update resources set fence = fence + 1
     where resource = p_resource and holder is null and not exists (select from keys where key = p_key)
    returning fence, (select fence from resources where resource = p_resource) as seen
  ), raised as (
    insert into sink_fences as sink (resource, fence) select p_resource, fence from granted
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence)
  )
  select fence, seen from granted
$$`);
const baseline = JSON.parse(
  (
    await client.query(
      `select ${(await import('../src/store/postgres/transaction-guard.js')).SESSION_BASELINE} as b`,
    )
  ).rows[0].b,
);

const insertTarget = (key: string) =>
  client.query({
    name: 'target',
    text: `insert into ${q}.target (key, amount) values ($1, 1)`,
    values: [key],
  });
const raiseFence = {
  name: 'raise',
  text: `update ${q}.resources set fence = fence + 1 where resource = $1 and holder is null
    and not exists (select from ${q}.keys where key = $2) returning fence`,
};
const raiseSink = {
  name: 'sink',
  text: `insert into ${q}.sink_fences as sink (resource, fence) values ($1, $2)
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence)`,
};
const insertKey = {
  name: 'key',
  text: `insert into ${q}.keys (key, resource, digest, state, fence, retry_safety, result,
      updated_at, granted_at, granted_state, granted_fence)
    values ($1, 'r', $2, 'done', $3, 'unsafe', $4, now(), now(), 'done', $3)`,
};

type Variant = (key: string) => Promise<unknown>;
const writes =
  (check: boolean, keyRowOnly = false): Variant =>
  async (key) => {
    await client.query('begin');
    if (check)
      await client.query({
        name: 'check',
        text: `select pg_catalog.set_config('sideeffect.transactional_key', $1, true)`,
        values: [key],
      });
    let fence = 0;
    if (!keyRowOnly) {
      fence = Number((await client.query({ ...raiseFence, values: ['r', key] })).rows[0].fence);
      await client.query({ ...raiseSink, values: ['r', fence] });
    }
    await insertTarget(key);
    await client.query({ ...insertKey, values: [key, digest, fence, resultBytes] });
    await client.query('commit');
  };
const shipped =
  (reset: boolean): Variant =>
  async (key) => {
    const open = openTransaction(q, {
      isolation: 'read committed',
      key,
      resource: 'r',
      digest,
      ttlMs: 30_000,
      lockWait: '1000ms',
      pooled: false,
    });
    const opened = ((await client.query(open)) as unknown as pg.QueryResult[])[1]!.rows[0];
    await insertTarget(key);
    let finish = finishTransaction(q, {
      key,
      resource: 'r',
      digest,
      fence: Number(opened.o_fence),
      retrySafety: 'unsafe',
      result: resultBytes,
      xid: opened.o_xid,
      ttlMs: 30_000,
      remainingMs: 29_000,
      baseline,
      pooled: false,
      temp: null,
      prepared: null,
    });
    if (!reset) finish = finish.slice(finish.indexOf(`select * from ${q}.tx_finish`));
    await client.query(finish);
  };

const variants: Record<string, Variant> = {
  'hand-written': async (key) => {
    await client.query('begin');
    await client.query({
      name: 'claim',
      text: `insert into ${q}.idem (key, state) values ($1, 'applying') on conflict (key) do nothing returning key`,
      values: [key],
    });
    await insertTarget(key);
    await client.query({
      name: 'record',
      text: `update ${q}.idem set state = 'done', result = $2 where key = $1`,
      values: [key, resultBytes],
    });
    await client.query('commit');
  },
  'key row only': writes(false, true),
  'required writes': writes(false),
  '+ commit check': writes(true),
  '+ fingerprint twice': async (key) => {
    await writes(true)(key);
    for (const name of ['fp1', 'fp2'])
      await client.query({
        name,
        text: `select ${q}.tx_session_state(current_user::text, pg_catalog.current_setting('search_path'))`,
      });
  },
  'tx_open/tx_finish prepared': async (key) => {
    await client.query('begin');
    const opened = (
      await client.query({
        name: 'open',
        text: `select * from ${q}.tx_open($1, 'r', $2, '30000ms', '1000ms', current_user::text, pg_catalog.current_setting('search_path'), false)`,
        values: [key, digest],
      })
    ).rows[0];
    await insertTarget(key);
    await client.query({
      name: 'finish',
      text: `select * from ${q}.tx_finish($1, 'r', $2, $3, 'unsafe', $4, $5, '30000ms', '29000ms', current_user::text, pg_catalog.current_setting('search_path'), false, null, null)`,
      values: [key, digest, opened.o_fence, resultBytes, opened.o_xid],
    });
    await client.query('commit');
  },
  '+ simple query (no reset)': shipped(false),
  shipped: shipped(true),
  'tx_grant_fresh (sql)': async (key) => {
    await client.query('begin');
    await client.query({
      name: 'fresh-sql',
      text: `select * from ${q}.tx_grant_fresh_sql($1, 'r')`,
      values: [key],
    });
    await client.query('rollback');
  },
  'tx_grant_fresh (plpgsql, 0020)': async (key) => {
    await client.query('begin');
    await client.query({
      name: 'fresh-plpgsql',
      text: `select * from ${q}.tx_grant_fresh($1, 'r')`,
      values: [key],
    });
    await client.query('rollback');
  },
};

let run = 0;
const samples = new Map<string, { postgres: number[]; node: number[] }>();
const measureRunner = async () => {
  const started = micros(poolPid);
  const node = process.cpuUsage();
  for (let n = 0; n < PER_ROUND; n++) {
    const key = `p-${run}-${n}`;
    await runner.executeInTransaction<pg.PoolClient>({ key, resource: 'r' }, async ({ tx }) => {
      await tx.query({
        name: 'target',
        text: `insert into ${q}.target (key, amount) values ($1, 1)`,
        values: [key],
      });
      return result;
    });
  }
  const { user, system } = process.cpuUsage(node);
  return { postgres: (micros(poolPid) - started) / PER_ROUND, node: (user + system) / PER_ROUND };
};
// Warm up every variant (plans, the pool's connection), then the rounds.
await runner.execute({ key: 'warm', resource: 'w' }, async () => result);
for (let round = -1; round < ROUNDS; round++) {
  const names = Object.keys(variants);
  if (round % 2 === 1) names.reverse();
  for (const name of [...names, 'PgStore (Runner)']) {
    run += 1;
    let sample: { postgres: number; node: number };
    if (name === 'PgStore (Runner)') sample = await measureRunner();
    else {
      const started = micros(pid);
      const node = process.cpuUsage();
      for (let n = 0; n < PER_ROUND; n++) await variants[name]!(`k-${run}-${n}`);
      const { user, system } = process.cpuUsage(node);
      sample = {
        postgres: (micros(pid) - started) / PER_ROUND,
        node: (user + system) / PER_ROUND,
      };
    }
    if (round < 0) continue;
    const s = samples.get(name) ?? { postgres: [], node: [] };
    s.postgres.push(sample.postgres);
    s.node.push(sample.node);
    samples.set(name, s);
  }
}
console.log(
  `transactional ablation: ${ROUNDS} rounds of ${PER_ROUND} per variant, one caller; load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
console.log('variant                        Postgres µs/op   Node µs/op');
for (const [name, s] of samples) {
  console.log(
    `${name.padEnd(30)} ${median(s.postgres).toFixed(0).padStart(14)} ${median(s.node).toFixed(0).padStart(12)}`,
  );
}
await client.query(`drop schema ${q} cascade`);
await client.end();
await pool.end();
