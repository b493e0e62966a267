/**
 * What a transactional effect's Postgres CPU is made of (issues 41, 47): one connection, one
 * caller, each variant a transaction that inserts one row, alternating in rounds; the figure is
 * the backend's CPU per transaction (/proc/<pid>/schedstat), median of the rounds, so the load of
 * other processes on the machine changes it little. Each variant adds one part to the one above
 * it, ending at what PgStore sends; `node` is this process's CPU per transaction.
 *
 * - hand-written: the bench's peer (claim the key, the insert, record the result), prepared. It
 *   takes no lock on a resource and nothing stops a commit made around it.
 * - hand-written, same promise: the peer that keeps the store's promise by hand: the resource's
 *   row locked and its fence raised, the key claimed, and a deferred check on the key's row that
 *   refuses a COMMIT reaching it before the result is recorded.
 * - key row only: the insert and a done key row, prepared: what a key-row lease would write.
 * - required writes: + the resource's fence raised and the sink mark raised (the lease and the
 *   fence the work is given), prepared.
 * - + commit guard: the grant's tx_grants row written and deleted (0017's deferred check).
 * - + fingerprint twice: tx_session_state() at the start and the end, as 0.3.0 took it.
 * - fingerprint once instead: tx_session_mark() after the work only (0023).
 * - tx_begin/tx_settle prepared: PgStore's two functions, each prepared, BEGIN and COMMIT apart.
 * - + simple query (no reset): PgStore's open and finish texts up to the COMMIT, each parsed and
 *   planned per call.
 * - shipped: PgStore's exact open and finish texts (the reset and the fingerprint after it).
 * - the PgStore path, through Runner.executeInTransaction on a one-connection pool.
 * - the same on a schema switched to the key-row lease (migration 0025): the resource's advisory
 *   lock instead of its row, the fence from the store's sequence.
 * - tx_grant_fresh() as migration 0020 made it (plpgsql) beside its earlier language sql body.
 *
 * Then the session check against the connection's prepared statements: the fingerprints and the
 * PgStore path again with 1,000 named statements prepared on both connections, as an
 * application's driver leaves them.
 *
 * Run: npx tsx bench/transactional-ablation.ts   (DATABASE_URL as the store bench;
 * ABLATION_ROUNDS, ABLATION_OPS and ABLATION_PREPARED size it)
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import pg from 'pg';
import { Runner } from '../src/core/index.js';
import { transactionalDigest } from '../src/store/digest.js';
import { migrate, PgStore } from '../src/store/postgres/index.js';
import { SESSION_BASELINE, type SessionBaseline } from '../src/store/postgres/transaction-guard.js';
import { finishTransaction, openTransaction } from '../src/store/postgres/transaction-sql.js';
import { median } from './support/figures.js';

/** The peer that keeps the store's promise by hand. */
const SAME_PROMISE = 'hand-written, same promise';
/** The required writes with 0.2.0's commit check on resources disabled. */
const WITHOUT_0_2_CHECK = 'required writes, no 0.2.0 check';
/** The prototype of the commit guard on the key row. */
const KEY_ROW_GUARD = 'commit guard on the key row (proto)';
/** The provisional key row's mark in that prototype. */
const PROVISIONAL = 'transactional grant in flight';
/** The PgStore path itself. */
const RUNNER = 'PgStore (Runner)';
/** The PgStore path on a schema that takes the key-row lease. */
const RUNNER_KEY_ROW = 'PgStore (Runner), key-row lease';

const DATABASE_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
const ROUNDS = Number(process.env.ABLATION_ROUNDS ?? 7);
const PER_ROUND = Number(process.env.ABLATION_OPS ?? 200);
const PREPARED = Number(process.env.ABLATION_PREPARED ?? 1_000);

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
const keyRowPool = new pg.Pool({ connectionString: DATABASE_URL, max: 1, idleTimeoutMillis: 0 });
const keyRowSchema = `${schema}_key_row`;
const keyRowRunner = new Runner(new PgStore({ pool: keyRowPool, schema: keyRowSchema }), {
  ttlMs: 30_000,
});
let keyRowPid = 0;
keyRowPool.on('connect', (c) => {
  keyRowPid = (c as unknown as { processID: number }).processID;
});
const CALLER = `current_user::text, pg_catalog.current_setting('search_path')`;

await migrate(pool, { schema });
await migrate(keyRowPool, { schema: keyRowSchema, transactionalLease: 'key-row', log: () => {} });
await client.query(`create table ${q}.target (key text primary key, amount int not null)`);
await client.query(
  `create table ${q}.idem (key text primary key, state text not null, result bytea)`,
);
await client.query(`insert into ${q}.resources (resource) values ('r')`);
// The same promise by hand: a resource row locked and fenced, and a key row whose deferred
// check refuses a COMMIT that reaches it before its result is recorded.
await client.query(`
  create table ${q}.peer_resources (resource text primary key, fence bigint not null);
  insert into ${q}.peer_resources values ('r', 0);
  create table ${q}.peer_keys (key text primary key, state text not null, fence bigint not null,
    result bytea);
  create function ${q}.peer_recorded() returns trigger language plpgsql as $$
  begin
    if (select k.state from ${q}.peer_keys k where k.key = new.key) <> 'done' then
      raise exception 'the transaction of key % ended before its result was recorded', new.key;
    end if;
    return null;
  end $$;
  create constraint trigger peer_recorded after insert on ${q}.peer_keys
    deferrable initially deferred for each row execute function ${q}.peer_recorded();`);
// The prototype's deferred check: a provisional key row still there at the commit is refused.
await client.query(`
  create function ${q}.proto_key_check() returns trigger language plpgsql as $$
  begin
    if exists (select from ${q}.keys k where k.key = new.key and k.reason = '${PROVISIONAL}') then
      raise exception using errcode = 'SE021', message = 'provisional key row at the commit';
    end if;
    return null;
  end $$;
  create constraint trigger proto_key_recorded after insert or update on ${q}.keys
    deferrable initially deferred for each row when (new.reason = '${PROVISIONAL}')
    execute function ${q}.proto_key_check();`);
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
  (await client.query(`select ${SESSION_BASELINE} as b`)).rows[0].b,
) as SessionBaseline;

const insertTarget = (key: string) =>
  client.query({
    name: 'target',
    text: `insert into ${q}.target (key, amount) values ($1, 1)`,
    values: [key],
  });
const raiseFence = {
  name: 'raise',
  text: `update ${q}.resources set fence = fence + 1 where resource = $1 and holder is null
    and not exists (select from ${q}.keys where key = $2) returning fence, txid_current() as xid`,
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
const fingerprint = (name: string, fn: 'tx_session_state' | 'tx_session_mark') =>
  client.query({ name, text: `select ${q}.${fn}(${CALLER})` });

type Variant = (key: string) => Promise<unknown>;
/**
 * The writes of a grant and its record, prepared; `guard` adds the commit guard: 0017's tx_grants
 * row, or the prototype of issue 47's item 2 (a provisional key row written at the grant, which a
 * deferred trigger on keys refuses to commit, made done by the record).
 */
const writes =
  (guard: 'none' | 'tx_grants' | 'key row', keyRowOnly = false): Variant =>
  async (key) => {
    await client.query('begin');
    let fence = 0;
    if (!keyRowOnly) {
      const granted = (await client.query({ ...raiseFence, values: ['r', key] })).rows[0];
      fence = Number(granted.fence);
      await client.query({ ...raiseSink, values: ['r', fence] });
      if (guard === 'key row') {
        await client.query({
          name: 'provisional',
          text: `insert into ${q}.keys (key, resource, digest, state, fence, retry_safety, reason, updated_at)
            values ($1, 'r', $2, 'held', $3, 'unsafe', '${PROVISIONAL}', now())`,
          values: [key, digest, fence],
        });
        await insertTarget(key);
        await client.query({
          name: 'provisional-done',
          text: `update ${q}.keys set state = 'done', result = $2, reason = null, updated_at = now(),
              granted_at = now(), granted_state = 'done', granted_fence = fence
            where key = $1`,
          values: [key, resultBytes],
        });
        await client.query('commit');
        return;
      }
      if (guard === 'tx_grants')
        await client.query({
          name: 'grant',
          text: `insert into ${q}.tx_grants (xid, key, synchronous_commit, session_replication_role)
            values ($1, $2, current_setting('synchronous_commit'), current_setting('session_replication_role'))`,
          values: [granted.xid, key],
        });
    }
    await insertTarget(key);
    await client.query({ ...insertKey, values: [key, digest, fence, resultBytes] });
    if (guard === 'tx_grants')
      await client.query({
        name: 'ungrant',
        text: `delete from ${q}.tx_grants where xid = txid_current() and key = $1`,
        values: [key],
      });
    await client.query('commit');
  };
/** PgStore's open and finish texts; without `reset`, the finish ends at its COMMIT. */
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
      session: false,
    });
    const opened = ((await client.query(open)) as unknown as pg.QueryResult[]).at(-1)!.rows[0];
    await insertTarget(key);
    const finish = finishTransaction(q, {
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
      countPrepared: false,
    });
    const statements = finish.split(';\n');
    await client.query(
      reset ? finish : statements.slice(0, statements.indexOf('commit') + 1).join(';\n'),
    );
  };

const variants: Record<string, Variant> = {
  'hand-written (peer)': async (key) => {
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
  [SAME_PROMISE]: async (key) => {
    await client.query('begin');
    const { fence } = (
      await client.query({
        name: 'peer-lock',
        text: `update ${q}.peer_resources set fence = fence + 1 where resource = $1 returning fence`,
        values: ['r'],
      })
    ).rows[0];
    await client.query({
      name: 'peer-claim',
      text: `insert into ${q}.peer_keys (key, state, fence) values ($1, 'applying', $2) on conflict (key) do nothing returning key`,
      values: [key, fence],
    });
    await insertTarget(key);
    await client.query({
      name: 'peer-record',
      text: `update ${q}.peer_keys set state = 'done', result = $2 where key = $1`,
      values: [key, resultBytes],
    });
    await client.query('commit');
  },
  'key row only': writes('none', true),
  'required writes': writes('none'),
  [WITHOUT_0_2_CHECK]: writes('none'),
  '+ commit guard (tx_grants row)': writes('tx_grants'),
  [KEY_ROW_GUARD]: writes('key row'),
  '+ fingerprint twice (0.3.0)': async (key) => {
    await writes('tx_grants')(key);
    await fingerprint('fp-state-1', 'tx_session_state');
    await fingerprint('fp-state-2', 'tx_session_state');
  },
  'fingerprint once instead (0023)': async (key) => {
    await writes('tx_grants')(key);
    await fingerprint('fp-mark', 'tx_session_mark');
  },
  'tx_begin/tx_settle prepared': async (key) => {
    await client.query('begin');
    const opened = (
      await client.query({
        name: 'open',
        text: `select * from ${q}.tx_begin($1, 'r', $2, '30000ms', '1000ms', ${CALLER}, false)`,
        values: [key, digest],
      })
    ).rows[0];
    await insertTarget(key);
    await client.query({
      name: 'settle',
      text: `select ${q}.tx_settle($1, 'r', $2, $3, 'unsafe', $4, $5, '30000ms', '29000ms', false, null, null)`,
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
interface Sample {
  postgres: number;
  node: number;
}
const viaRunner = async (via: Runner, backend: () => number): Promise<Sample> => {
  const started = micros(backend());
  const node = process.cpuUsage();
  for (let n = 0; n < PER_ROUND; n++) {
    const key = `p-${run}-${n}`;
    await via.executeInTransaction<pg.PoolClient>({ key, resource: 'r' }, async ({ tx }) => {
      await tx.query({
        name: 'target',
        text: `insert into ${q}.target (key, amount) values ($1, 1)`,
        values: [key],
      });
      return result;
    });
  }
  const { user, system } = process.cpuUsage(node);
  return { postgres: (micros(backend()) - started) / PER_ROUND, node: (user + system) / PER_ROUND };
};
const direct = async (name: string): Promise<Sample> => {
  const variant = variants[name]!;
  // The 0.2.0 commit check on resources (tx_commits_its_key) queues an event at every fence
  // raised: this variant measures the writes without it.
  const trigger = (on: boolean) =>
    client.query(
      `alter table ${q}.resources ${on ? 'enable' : 'disable'} trigger tx_commits_its_key`,
    );
  if (name === WITHOUT_0_2_CHECK) await trigger(false);
  const started = micros(pid);
  const node = process.cpuUsage();
  for (let n = 0; n < PER_ROUND; n++) await variant(`k-${run}-${n}`);
  const { user, system } = process.cpuUsage(node);
  const sample = {
    postgres: (micros(pid) - started) / PER_ROUND,
    node: (user + system) / PER_ROUND,
  };
  if (name === WITHOUT_0_2_CHECK) await trigger(true);
  return sample;
};

/** Medians over the rounds (one round of warm-up first), the variants alternating in order. */
const measure = async (names: string[]) => {
  const samples = new Map<string, { postgres: number[]; node: number[] }>();
  for (let round = -1; round < ROUNDS; round++) {
    const order = round % 2 === 1 ? [...names].reverse() : names;
    for (const name of order) {
      run += 1;
      const sample =
        name === RUNNER
          ? await viaRunner(runner, () => poolPid)
          : name === RUNNER_KEY_ROW
            ? await viaRunner(keyRowRunner, () => keyRowPid)
            : await direct(name);
      if (round < 0) continue;
      const s = samples.get(name) ?? { postgres: [], node: [] };
      s.postgres.push(sample.postgres);
      s.node.push(sample.node);
      samples.set(name, s);
    }
  }
  return new Map(
    [...samples].map(([name, s]) => [name, { postgres: median(s.postgres), node: median(s.node) }]),
  );
};

await runner.execute({ key: 'warm', resource: 'w' }, async () => result);
await keyRowRunner.execute({ key: 'warm', resource: 'w' }, async () => result);
const all = await measure([...Object.keys(variants), RUNNER, RUNNER_KEY_ROW]);
console.log(
  `transactional ablation: ${ROUNDS} rounds of ${PER_ROUND} per variant, one caller; load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
const peer = all.get('hand-written (peer)')!.postgres;
const samePromise = all.get(SAME_PROMISE)!.postgres;
console.log(
  `${'variant'.padEnd(34)} ${'Postgres µs/op'.padStart(14)} ${'Node µs/op'.padStart(11)} ${'x peer'.padStart(7)} ${'x same promise'.padStart(14)}`,
);
for (const [name, s] of all) {
  console.log(
    `${name.padEnd(34)} ${s.postgres.toFixed(0).padStart(14)} ${s.node.toFixed(0).padStart(11)} ${(s.postgres / peer).toFixed(2).padStart(7)} ${(s.postgres / samePromise).toFixed(2).padStart(14)}`,
  );
}

// The session check against the application's prepared statements: named statements of the
// driver on both connections (pg_prepared_statements lists them all, from_sql false).
const prepare = async (on: pg.ClientBase) => {
  for (let i = 0; i < PREPARED; i++)
    await on.query({ name: `app-statement-${i}`, text: `select ${i}::int as n` });
};
// The peer and the bare writes, read no prepared statement: what the connection's statements cost
// the backend anyway.
const CHECKED = [
  'hand-written (peer)',
  'required writes',
  '+ fingerprint twice (0.3.0)',
  'fingerprint once instead (0023)',
  'shipped',
  RUNNER,
  RUNNER_KEY_ROW,
];
const without = await measure(CHECKED);
await prepare(client);
for (const each of [pool, keyRowPool]) {
  const pooled = await each.connect();
  await prepare(pooled);
  pooled.release();
}
const withPrepared = await measure(CHECKED);
console.log(
  `\nthe session check at 0 and ${PREPARED} named prepared statements on the connection (Postgres µs/op)`,
);
console.log(
  `${'variant'.padEnd(34)} ${'at 0'.padStart(8)} ${`at ${PREPARED}`.padStart(8)} ${'ratio'.padStart(6)}`,
);
for (const name of CHECKED) {
  const at0 = without.get(name)!.postgres;
  const atN = withPrepared.get(name)!.postgres;
  console.log(
    `${name.padEnd(34)} ${at0.toFixed(0).padStart(8)} ${atN.toFixed(0).padStart(8)} ${(atN / at0).toFixed(2).padStart(6)}`,
  );
}
await client.query(`drop schema ${q} cascade`);
await client.query(`drop schema "${keyRowSchema}" cascade`);
await client.end();
await pool.end();
await keyRowPool.end();
