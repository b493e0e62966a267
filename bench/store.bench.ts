/**
 * PgStore against the floor of what a correct operation must cost, in one run, on one pool:
 *
 * - execute: `Runner.execute` with PgStore (its statement batching as configured by default)
 *   beside the bare statements a correct execute needs, straight through pg: two single-row
 *   upsert commits per action (claim the key, record the result); and beside the same two upserts
 *   batched across concurrent callers (one `unnest` statement per kind while the previous one is
 *   in flight, no timer). At 1, 8 and 32 concurrent callers.
 * - replay: acquire of a done key beside a bare single-row SELECT of the stored result.
 * - transactional: `Runner.executeInTransaction` inserting one row on the store's transaction,
 *   beside (a) the same insert as a hand-written same-database idempotent write (one transaction:
 *   claim the key row, the insert, record the result) and (b) our own `execute` + `writeFenced`.
 *   Then the same under the key-row lease (migration 0025, a second schema switched to it), beside
 *   the same two and (c) the same promise by hand: the resource's row locked and its fence raised,
 *   the key claimed, and a deferred check that refuses a COMMIT reaching the key before its result.
 * - execute with a closed breaker: the same execute with the effect activity's breaker check
 *   (`BreakerGate` as the worker builds it, default closedCacheMs) beside the plain one; target
 *   at most 3 % slower at 8 callers.
 * - latency of one caller's execute, p50 and p99, with the store's batching on and off.
 *
 * Each pair runs ROUNDS rounds in alternating order, each round measuring both sides back to
 * back; the ratio is the median of the rounds' ratios, so a change in machine load during the
 * run hits both sides of a round alike. Beside each ratio: the CPU per operation of this process
 * (Node) and of the pool's Postgres backends (see support/backend-cpu.ts), medians of the rounds.
 * Never fails on time: each figure is printed with its target and met/MISSED.
 *
 * Run alone: npx tsx bench/store.bench.ts   (DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test)
 * `BENCH_ONLY=transactional` (a substring of a figure's name) runs just the matching figures.
 */
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';
import { noopMetricMeter } from '@temporalio/common';
import pg from 'pg';
import { BreakerGate } from '../src/activities/breaker-gate.js';
import { defaultBreakerPolicy, Runner } from '../src/core/index.js';
import { migrate, PgFencedSink, PgStore } from '../src/store/postgres/index.js';
import { BackendCpu, cpuMethod } from './support/backend-cpu.js';
import { batchedUpserts } from './support/batched-upserts.js';
import { busyRatios, busyResourceLatencies } from './support/busy-resources.js';
import {
  type BenchReport,
  type Figure,
  median,
  percentile,
  progress,
  summary,
} from './support/figures.js';

const DATABASE_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
const CALLERS = [1, 8, 32] as const;
type Callers = (typeof CALLERS)[number];
const ROUNDS = 7;
const ROUND_MS = 1_000;
const LATENCY_ROUNDS = 6;
const LATENCY_ROUND_MS = 1_000;
const REPLAY_KEYS = 1_000;
/** Rounds per side of the busy-resources figure; its target: batching costs a free key at most 1.2x. */
const BUSY_ROUNDS = 5;
const BUSY_LATENCY_TARGET = 1.2;
/** The p50 of one caller's execute with batching on may be at most this much above batching off. */
const LATENCY_P50_TARGET = 1.1;

type Op = (caller: number, n: number) => Promise<void>;

/**
 * One pair of operations compared at each caller count, with the target at each (if any), and
 * the most Postgres CPU per op ours may cost over the peer's (a figure of its own, if set).
 */
interface Scenario {
  name: string;
  ours: string;
  peer: string;
  targets: Partial<Record<Callers, number>>;
  postgresCpuAtMost?: number;
}

const SCENARIOS: Scenario[] = [
  {
    name: 'execute / 2 upserts',
    ours: 'execute',
    peer: '2 upserts',
    targets: { 1: 0.65, 8: 1.0, 32: 1.2 },
  },
  {
    name: 'execute / 2 batched upserts',
    ours: 'execute',
    peer: '2 batched upserts',
    targets: { 32: 0.8 },
  },
  { name: 'replay / select', ours: 'replay', peer: 'select', targets: { 32: 1.0 } },
  {
    // The effect activity's breaker check on a closed breaker (docs/operations.md, "Outages"):
    // the worker trusts the store's "closed" for closedCacheMs, so no round trip per attempt.
    name: 'execute with a closed breaker / execute',
    ours: 'execute + closed breaker',
    peer: 'execute',
    targets: { 8: 0.97 },
  },
  {
    name: 'transactional / hand-written',
    ours: 'transactional',
    peer: 'hand-written transaction',
    targets: { 1: 0.7, 8: 0.7, 32: 0.7 },
    postgresCpuAtMost: 1.5,
  },
  {
    name: 'transactional / execute + writeFenced',
    ours: 'transactional',
    peer: 'execute + writeFenced',
    targets: { 1: 1.0, 8: 1.0, 32: 1.0 },
  },
  {
    // What the switch buys, in one run (no target: the two figures below have theirs).
    name: 'transactional, key-row / resource-row lease',
    ours: 'transactional, key-row lease',
    peer: 'transactional',
    targets: {},
  },
  {
    name: 'transactional, key-row lease / hand-written',
    ours: 'transactional, key-row lease',
    peer: 'hand-written transaction',
    targets: { 1: 0.7, 8: 0.6, 32: 0.6 },
    postgresCpuAtMost: 3,
  },
  {
    name: 'transactional, key-row lease / execute + writeFenced',
    ours: 'transactional, key-row lease',
    peer: 'execute + writeFenced',
    targets: { 1: 1.0, 8: 1.0, 32: 1.0 },
  },
  {
    name: 'transactional, key-row lease / the same promise by hand',
    ours: 'transactional, key-row lease',
    peer: 'the same promise by hand',
    targets: { 1: 1.0, 8: 1.0, 32: 1.0 },
  },
];

/** What one measured round gives: ops/s and CPU µs per op of Node and of the Postgres backends. */
interface Sample {
  rate: number;
  node: number;
  postgres: number;
}

/** Runs the store bench. `log` gets a progress line per figure measured. */
export async function storeBench(log: (line: string) => void): Promise<BenchReport> {
  const schema = `sideeffect_bench_${randomBytes(3).toString('hex')}`;
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 32 });
  pool.on('error', () => {});
  const cpu = new BackendCpu(pool);
  const store = new PgStore({ pool, schema });
  const unbatched = new PgStore({ pool, schema, batching: false });
  const sink = new PgFencedSink({ pool, schema });
  const runner = new Runner(store, { ttlMs: 30_000 });
  const keyRowSchema = `${schema}_key_row`;
  const keyRowRunner = new Runner(new PgStore({ pool, schema: keyRowSchema }), { ttlMs: 30_000 });
  const gate = new BreakerGate(store);
  const bank = { ...defaultBreakerPolicy, group: 'bench-bank' };
  const observer = { meter: noopMetricMeter, log: () => {} };
  const unbatchedRunner = new Runner(unbatched, { ttlMs: 30_000 });
  const result = { payload: new TextEncoder().encode('ok') };
  const resultBytes = Buffer.from(result.payload);
  const q = `"${schema}"`;
  const floor = `${q}.bench_floor`;
  const target = `${q}.bench_target`;
  const idem = `${q}.bench_idem`;
  const claim = {
    name: 'bench_floor_claim',
    text: `insert into ${floor} (key, state) values ($1, 'applying')
      on conflict (key) do update set state = excluded.state`,
  };
  const record = {
    name: 'bench_floor_record',
    text: `insert into ${floor} (key, state, result) values ($1, 'done', $2)
      on conflict (key) do update set state = excluded.state, result = excluded.result`,
  };
  const read = { name: 'bench_floor_read', text: `select result from ${floor} where key = $1` };
  /** The effect every transactional variant performs: one row in a table of the same database. */
  const insertTarget = {
    name: 'bench_target_insert',
    text: `insert into ${target} (key, amount) values ($1, 1)`,
  };
  const handClaim = {
    name: 'bench_idem_claim',
    text: `insert into ${idem} (key, state) values ($1, 'applying') on conflict (key) do nothing
      returning key`,
  };
  const handRecord = {
    name: 'bench_idem_record',
    text: `update ${idem} set state = 'done', result = $2 where key = $1`,
  };
  const promiseResources = `${q}.bench_promise_resources`;
  const promiseKeys = `${q}.bench_promise_keys`;
  const promiseLock = {
    name: 'bench_promise_lock',
    text: `insert into ${promiseResources} as r (resource, fence) values ($1, 1)
      on conflict (resource) do update set fence = r.fence + 1 returning fence`,
  };
  const promiseClaim = {
    name: 'bench_promise_claim',
    text: `insert into ${promiseKeys} (key, state, fence) values ($1, 'applying', $2)
      on conflict (key) do nothing returning key`,
  };
  const promiseRecord = {
    name: 'bench_promise_record',
    text: `update ${promiseKeys} set state = 'done', result = $2 where key = $1`,
  };
  const batched = batchedUpserts(pool, floor);
  let run = 0;
  const applied = (execution: { outcome: string }) => {
    if (execution.outcome !== 'applied')
      throw new Error(`expected applied, got ${execution.outcome}`);
  };

  const ops: Record<string, Op> = {
    execute: async (caller, n) => {
      applied(
        await runner.execute(
          { key: `e-${run}-${caller}-${n}`, resource: `r-${caller}` },
          async () => result,
        ),
      );
    },
    'execute + closed breaker': async (caller, n) => {
      const key = `c-${run}-${caller}-${n}`;
      applied(
        await runner.execute({ key, resource: `r-${caller}` }, async () => result, {
          // As the effect activity does: a trusted "closed" answers at once.
          admit: () => {
            if (gate.trustsClosed(bank.group)) return;
            return gate.admit(bank, key, observer).then((admission) => {
              if (!admission.admitted) throw new Error('the bench breaker opened');
            });
          },
        }),
      );
    },
    '2 upserts': async (caller, n) => {
      const key = `f-${run}-${caller}-${n}`;
      await pool.query({ ...claim, values: [key] });
      await pool.query({ ...record, values: [key, resultBytes] });
    },
    '2 batched upserts': (caller, n) => batched(`b-${run}-${caller}-${n}`, resultBytes),
    replay: async (_caller, n) => {
      const acq = await store.acquire(
        { key: `done-${n % REPLAY_KEYS}`, resource: 'replay' },
        30_000,
      );
      if (acq.outcome !== 'replayed') throw new Error(`expected replayed, got ${acq.outcome}`);
    },
    select: async (_caller, n) => {
      const { rows } = await pool.query({ ...read, values: [`done-${n % REPLAY_KEYS}`] });
      if (rows.length !== 1) throw new Error('expected one row');
    },
    transactional: async (caller, n) => {
      const key = `t-${run}-${caller}-${n}`;
      applied(
        await runner.executeInTransaction<pg.PoolClient>(
          { key, resource: `r-${caller}` },
          async ({ tx }) => {
            await tx.query({ ...insertTarget, values: [key] });
            return result;
          },
        ),
      );
    },
    'hand-written transaction': async (caller, n) => {
      const key = `h-${run}-${caller}-${n}`;
      const client = await pool.connect();
      try {
        await client.query('begin');
        const claimed = await client.query({ ...handClaim, values: [key] });
        if (claimed.rowCount !== 1) throw new Error('expected a fresh key');
        await client.query({ ...insertTarget, values: [key] });
        await client.query({ ...handRecord, values: [key, resultBytes] });
        await client.query('commit');
      } finally {
        client.release();
      }
    },
    'transactional, key-row lease': async (caller, n) => {
      const key = `k-${run}-${caller}-${n}`;
      applied(
        await keyRowRunner.executeInTransaction<pg.PoolClient>(
          { key, resource: `r-${caller}` },
          async ({ tx }) => {
            await tx.query({ ...insertTarget, values: [key] });
            return result;
          },
        ),
      );
    },
    'the same promise by hand': async (caller, n) => {
      const key = `s-${run}-${caller}-${n}`;
      const client = await pool.connect();
      try {
        await client.query('begin');
        const { fence } = (await client.query({ ...promiseLock, values: [`r-${caller}`] })).rows[0];
        const claimed = await client.query({ ...promiseClaim, values: [key, fence] });
        if (claimed.rowCount !== 1) throw new Error('expected a fresh key');
        await client.query({ ...insertTarget, values: [key] });
        await client.query({ ...promiseRecord, values: [key, resultBytes] });
        await client.query('commit');
      } finally {
        client.release();
      }
    },
    'execute + writeFenced': async (caller, n) => {
      const key = `w-${run}-${caller}-${n}`;
      applied(
        await runner.execute({ key, resource: `r-${caller}` }, async ({ lease }) => {
          await sink.writeFenced(lease.resource, lease.fence, (tx) =>
            tx.query({ ...insertTarget, values: [key] }),
          );
          return result;
        }),
      );
    },
  };

  /** `op` from `callers` callers for `ms`: ops/s and CPU µs per op of Node and of Postgres. */
  const measure = async (op: Op, callers: number, ms = ROUND_MS): Promise<Sample> => {
    run += 1;
    let done = 0;
    const start = performance.now();
    const deadline = start + ms;
    const node = process.cpuUsage();
    const postgres = cpu.micros();
    await Promise.all(
      Array.from({ length: callers }, async (_, caller) => {
        for (let n = 0; performance.now() < deadline; n++) {
          await op(caller, n);
          done += 1;
        }
      }),
    );
    const rate = (done / (performance.now() - start)) * 1000;
    const { user, system } = process.cpuUsage(node);
    return { rate, node: (user + system) / done, postgres: (cpu.micros() - postgres) / done };
  };

  /** Paired rounds, alternating which side goes first; medians of the rounds. */
  const pair = async (ours: Op, peer: Op, callers: number) => {
    const a: Sample[] = [];
    const b: Sample[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      if (round % 2 === 0) {
        a.push(await measure(ours, callers));
        b.push(await measure(peer, callers));
      } else {
        b.push(await measure(peer, callers));
        a.push(await measure(ours, callers));
      }
    }
    const m = (samples: Sample[], field: keyof Sample) => median(samples.map((s) => s[field]));
    return {
      ratio: median(a.map((s, i) => s.rate / b[i]!.rate)),
      ours: { rate: m(a, 'rate'), node: m(a, 'node'), postgres: m(a, 'postgres') },
      peer: { rate: m(b, 'rate'), node: m(b, 'node'), postgres: m(b, 'postgres') },
    };
  };

  /** One caller's execute latencies (ms), batching on and off in alternating rounds. */
  const latencies = async () => {
    const on: number[] = [];
    const off: number[] = [];
    for (let round = 0; round < LATENCY_ROUNDS; round++) {
      for (const [into, r] of round % 2 === 0
        ? ([
            [on, runner],
            [off, unbatchedRunner],
          ] as const)
        : ([
            [off, unbatchedRunner],
            [on, runner],
          ] as const)) {
        run += 1;
        const deadline = performance.now() + LATENCY_ROUND_MS;
        for (let n = 0; performance.now() < deadline; n++) {
          const began = performance.now();
          applied(
            await r.execute({ key: `l-${run}-${n}`, resource: 'latency' }, async () => result),
          );
          into.push(performance.now() - began);
        }
      }
    }
    return { on, off };
  };

  /** Round trips of one operation, counted at the connection. */
  const roundTrips = async (operation: () => Promise<unknown>): Promise<number> => {
    let queries = 0;
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      queries += 1;
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof query;
    try {
      await operation();
    } finally {
      pg.Client.prototype.query = query;
    }
    return queries;
  };

  const only = process.env.BENCH_ONLY;
  const figures: Figure[] = [];
  const notes: string[] = [];
  try {
    await migrate(pool, { schema });
    await migrate(pool, { schema: keyRowSchema, transactionalLease: 'key-row', log: () => {} });
    await pool.query(
      `create table ${floor} (key text primary key, state text not null, result bytea)`,
    );
    await pool.query(`create table ${target} (key text primary key, amount int not null)`);
    await pool.query(
      `create table ${idem} (key text primary key, state text not null, result bytea)`,
    );
    // The same promise by hand: the resource's row locked and fenced, and a key row whose
    // deferred check refuses a COMMIT that reaches it before its result is recorded.
    await pool.query(`
      create table ${promiseResources} (resource text primary key, fence bigint not null);
      create table ${promiseKeys} (key text primary key, state text not null,
        fence bigint not null, result bytea);
      create function ${q}.bench_promise_recorded() returns trigger language plpgsql as $$
      begin
        if (select k.state from ${promiseKeys} k where k.key = new.key) <> 'done' then
          raise exception 'the transaction of key % ended before its result was recorded', new.key;
        end if;
        return null;
      end $$;
      create constraint trigger bench_promise_recorded after insert on ${promiseKeys}
        deferrable initially deferred for each row execute function ${q}.bench_promise_recorded();`);
    for (let n = 0; n < REPLAY_KEYS; n++) {
      await runner.execute({ key: `done-${n}`, resource: 'replay' }, async () => result);
      await pool.query({ ...claim, values: [`done-${n}`] });
      await pool.query({ ...record, values: [`done-${n}`, resultBytes] });
    }
    // Warm every connection's prepared statements and plpgsql plans, then ANALYZE as autovacuum
    // would in production: a plan kept from a nearly empty table may scan where an index serves.
    for (const name of Object.keys(ops)) await measure(ops[name]!, 32, 500);
    await pool.query(
      `analyze ${q}.keys, ${q}.resources, ${q}.sink_fences, ${q}.events, ${floor}, ${target}, ${idem}, ${promiseResources}, ${promiseKeys}, "${keyRowSchema}".keys, "${keyRowSchema}".resources, "${keyRowSchema}".events`,
    );
    const autovacuum = (
      await pool.query<{ on: string }>(`select pg_catalog.current_setting('autovacuum') as on`)
    ).rows[0]!.on;
    const method = await cpuMethod(pool, cpu);
    const trips = {
      execute: await roundTrips(() =>
        runner.execute({ key: 'trips-e', resource: 'trips' }, async () => result),
      ),
      transactional: await roundTrips(() =>
        runner.executeInTransaction<pg.PoolClient>(
          { key: 'trips-t', resource: 'trips' },
          async ({ tx }) => {
            await tx.query({ ...insertTarget, values: ['trips-t'] });
            return result;
          },
        ),
      ),
    };

    for (const scenario of SCENARIOS) {
      if (only && !scenario.name.includes(only)) continue;
      for (const callers of CALLERS) {
        const p = await pair(ops[scenario.ours]!, ops[scenario.peer]!, callers);
        const goal = scenario.targets[callers];
        const figure: Figure = {
          bench: 'store',
          name: scenario.name,
          at: `${callers} caller${callers === 1 ? '' : 's'}`,
          value: p.ratio,
          ...(goal === undefined ? {} : { target: { atLeast: goal } }),
          detail: `${p.ours.rate.toFixed(0)} / ${p.peer.rate.toFixed(0)} ops/s; Postgres ${cpuText(p.ours.postgres)} / ${cpuText(p.peer.postgres)}, Node ${cpuText(p.ours.node)} / ${cpuText(p.peer.node)} µs per op`,
        };
        figures.push(figure);
        log(`store: ${figure.name} at ${figure.at}: ${figure.value.toFixed(2)} (${figure.detail})`);
        if (scenario.postgresCpuAtMost !== undefined) {
          const cpuFigure: Figure = {
            bench: 'store',
            name: `${scenario.name}, Postgres CPU per op`,
            at: figure.at,
            value: p.ours.postgres / p.peer.postgres,
            target: { atMost: scenario.postgresCpuAtMost },
            detail: `${cpuText(p.ours.postgres)} / ${cpuText(p.peer.postgres)} µs per op`,
          };
          figures.push(cpuFigure);
          log(`store: ${cpuFigure.name} at ${cpuFigure.at}: ${cpuFigure.value.toFixed(2)}`);
        }
      }
    }
    if (!only || 'latency'.includes(only)) {
      const { on, off } = await latencies();
      const [onP50, offP50] = [percentile(on, 50), percentile(off, 50)];
      const figure: Figure = {
        bench: 'store',
        name: 'execute p50 latency, batching on / off',
        at: '1 caller',
        value: onP50 / offP50,
        target: { atMost: LATENCY_P50_TARGET },
        detail: `p50 ${onP50.toFixed(2)} / ${offP50.toFixed(2)} ms, p99 ${percentile(on, 99).toFixed(2)} / ${percentile(off, 99).toFixed(2)} ms (${on.length} + ${off.length} calls)`,
      };
      figures.push(figure);
      log(`store: ${figure.name}: ${figure.value.toFixed(2)} (${figure.detail})`);
    }
    if (!only || 'busy'.includes(only)) {
      const l = await busyResourceLatencies(DATABASE_URL, schema, BUSY_ROUNDS);
      const ratios = busyRatios(l);
      for (const which of ['first', 'next'] as const) {
        const figure: Figure = {
          bench: 'store',
          name: `free-key acquire latency beside 63 busy, batching on / off (${which} call)`,
          at: '64 callers',
          value: ratios[which],
          target: { atMost: BUSY_LATENCY_TARGET },
          detail: `median ${median(l[which].on).toFixed(1)} / ${median(l[which].off).toFixed(1)} ms (${l[which].on.length} + ${l[which].off.length} rounds, pool 10)`,
        };
        figures.push(figure);
        log(`store: ${figure.name}: ${figure.value.toFixed(2)} (${figure.detail})`);
      }
    }
    notes.push(
      `store: PgStore, schema ${schema}, median of ${ROUNDS} paired rounds of ${ROUND_MS} ms; load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')} at the end`,
      `  ${method}; autovacuum ${autovacuum} (the tables were analyzed after the warm-up)`,
      `  round trips: execute ${trips.execute}, transactional execute ${trips.transactional} (the work's one insert included)`,
      '  detail: ours / peer; CPU per op, medians of the rounds',
    );
  } finally {
    await pool.query(`drop schema if exists ${q} cascade`).catch(() => {});
    await pool.query(`drop schema if exists "${keyRowSchema}" cascade`).catch(() => {});
    await pool.end();
  }
  return { figures, notes };
}

function cpuText(micros: number): string {
  return Number.isNaN(micros) ? 'n/a' : micros.toFixed(0);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const started = performance.now();
  const { figures, notes } = await storeBench((line) => progress(started, line));
  console.log(`${notes.join('\n')}\n\n${summary(figures)}`);
}
