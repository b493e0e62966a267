/**
 * PgStore against the floor of what a correct execute must cost, in one run, on one pool:
 *
 * - execute: `Runner.execute` with PgStore (acquire straight into applying, then complete) beside
 *   the bare statements a correct execute needs, issued straight through pg: two single-row upsert
 *   commits per action (claim the key, record the result). At 1, 8 and 32 concurrent callers.
 * - replay: acquire of a done key beside a bare single-row SELECT of the stored result.
 * - transactional: `Runner.executeInTransaction` inserting one row on the store's transaction,
 *   beside (a) the same insert as a hand-written same-database idempotent write (one transaction:
 *   claim the key row, the insert, record the result) and (b) our own `execute` + `writeFenced` of
 *   the same insert.
 *
 * Each pair runs several rounds in alternating order, each round measuring both sides back to back;
 * the ratio printed is the median of the rounds' ratios, so a change in machine load during the
 * run hits both sides of a round alike. Prints the table and
 * whether the targets hold (execute >= 0.6x floor, replay >= 0.8x, transactional >= 0.8x the
 * hand-written write and >= 1.3x execute + writeFenced); never fails on time. Beside each ratio it
 * prints, for information, the same comparison in CPU time per op (this process and the local
 * database's backends), which moves far less than throughput on a shared host.
 * Run: npx tsx bench/store.bench.ts   (DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test)
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import pg from 'pg';
import { Runner } from '../src/core/index.js';
import { migrate, PgFencedSink, PgStore } from '../src/store/postgres/index.js';

const DATABASE_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
const CONCURRENCIES = [1, 8, 32] as const;
const ROUNDS = 7;
const ROUND_MS = 1_000;
const REPLAY_KEYS = 1_000;
const TARGETS = { execute: 0.6, replay: 0.8, handWritten: 0.8, fenced: 1.3 } as const;

const schema = `sideeffect_bench_${randomBytes(3).toString('hex')}`;
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 32 });
pool.on('error', () => {});
const store = new PgStore({ pool, schema });
const sink = new PgFencedSink({ pool, schema });
const runner = new Runner(store, { ttlMs: 30_000 });
const result = { payload: new TextEncoder().encode('ok') };
const floorTable = `"${schema}".bench_floor`;
const claim = {
  name: 'bench_floor_claim',
  text: `insert into ${floorTable} (key, state) values ($1, 'applying')
    on conflict (key) do update set state = excluded.state`,
};
const record = {
  name: 'bench_floor_record',
  text: `insert into ${floorTable} (key, state, result) values ($1, 'done', $2)
    on conflict (key) do update set state = excluded.state, result = excluded.result`,
};
const read = { name: 'bench_floor_read', text: `select result from ${floorTable} where key = $1` };
const resultBytes = Buffer.from(result.payload);
const target = `"${schema}".bench_target`;
const idem = `"${schema}".bench_idem`;
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

let run = 0;
type Op = (caller: number, n: number) => Promise<void>;

const ops: Record<string, Op> = {
  'Runner.execute': async (caller, n) => {
    const action = { key: `e-${run}-${caller}-${n}`, resource: `r-${caller}` };
    const execution = await runner.execute(action, async () => result);
    if (execution.outcome !== 'applied')
      throw new Error(`expected applied, got ${execution.outcome}`);
  },
  'floor: 2 upserts': async (caller, n) => {
    const key = `f-${run}-${caller}-${n}`;
    await pool.query({ ...claim, values: [key] });
    await pool.query({ ...record, values: [key, resultBytes] });
  },
  'acquire (replay)': async (_caller, n) => {
    const acq = await store.acquire({ key: `done-${n % REPLAY_KEYS}`, resource: 'replay' }, 30_000);
    if (acq.outcome !== 'replayed') throw new Error(`expected replayed, got ${acq.outcome}`);
  },
  'tx execute': async (caller, n) => {
    const key = `t-${run}-${caller}-${n}`;
    const execution = await runner.executeInTransaction<pg.PoolClient>(
      { key, resource: `r-${caller}` },
      async ({ tx }) => {
        await tx.query({ ...insertTarget, values: [key] });
        return result;
      },
    );
    if (execution.outcome !== 'applied')
      throw new Error(`expected applied, got ${execution.outcome}`);
  },
  'hand-written idempotent tx': async (caller, n) => {
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
  'execute + writeFenced': async (caller, n) => {
    const key = `w-${run}-${caller}-${n}`;
    const execution = await runner.execute({ key, resource: `r-${caller}` }, async ({ lease }) => {
      await sink.writeFenced(lease.resource, lease.fence, (tx) =>
        tx.query({ ...insertTarget, values: [key] }),
      );
      return result;
    });
    if (execution.outcome !== 'applied')
      throw new Error(`expected applied, got ${execution.outcome}`);
  },
  'floor: 1 select': async (_caller, n) => {
    const { rows } = await pool.query({ ...read, values: [`done-${n % REPLAY_KEYS}`] });
    if (rows.length !== 1) throw new Error('expected one row');
  },
};

/** Clock ticks per second of /proc's CPU times. */
const TICKS_PER_SECOND = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' })) || 100;

/**
 * CPU microseconds spent so far by every process named postgres that /proc shows: the database's
 * backends when it runs on this machine, 0 when it does not (the CPU column then reads n/a).
 */
function postgresCpuMicros(): number {
  let ticks = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (!stat.includes('(postgres)')) continue;
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]); // utime, stime
    } catch {
      // The process ended meanwhile.
    }
  }
  return (ticks / TICKS_PER_SECOND) * 1e6;
}

/**
 * Runs `op` from `concurrency` callers for ROUND_MS; returns completed ops per second and the CPU
 * time per op of this process plus the local database's (steadier on a noisy machine than
 * throughput, which also moves with whatever else the host runs).
 */
async function measure(op: Op, concurrency: number): Promise<{ rate: number; cpu: number }> {
  run += 1;
  let done = 0;
  const deadline = performance.now() + ROUND_MS;
  const start = performance.now();
  const node = process.cpuUsage();
  const postgres = postgresCpuMicros();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, caller) => {
      for (let n = 0; performance.now() < deadline; n++) {
        await op(caller, n);
        done += 1;
      }
    }),
  );
  const rate = (done / (performance.now() - start)) * 1000;
  const { user, system } = process.cpuUsage(node);
  const database = postgresCpuMicros() - postgres;
  return { rate, cpu: database > 0 ? (user + system + database) / done : Number.NaN };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** `BENCH_ONLY=tx` (a substring of a scenario name) runs just the matching scenarios while tuning. */
const only = process.env.BENCH_ONLY;

/**
 * Median ops/s of each side, the median of the per-round ratios, and the median of the per-round
 * CPU ratios (the peer's CPU per op over ours: above 1 when ours costs less).
 */
async function pair(
  ours: string,
  floor: string,
  concurrency: number,
): Promise<{ ours: number; floor: number; ratio: number; cpuRatio: number }> {
  const a: Array<{ rate: number; cpu: number }> = [];
  const b: Array<{ rate: number; cpu: number }> = [];
  for (let round = 0; round < ROUNDS; round++) {
    if (round % 2 === 0) {
      a.push(await measure(ops[ours]!, concurrency));
      b.push(await measure(ops[floor]!, concurrency));
    } else {
      b.push(await measure(ops[floor]!, concurrency));
      a.push(await measure(ops[ours]!, concurrency));
    }
  }
  return {
    ours: median(a.map((x) => x.rate)),
    floor: median(b.map((x) => x.rate)),
    ratio: median(a.map((x, i) => x.rate / b[i]!.rate)),
    cpuRatio: median(a.map((x, i) => b[i]!.cpu / x.cpu)),
  };
}

/** Round trips of one execute, counted at the connection: the design says 2 (acquire, complete). */
async function roundTripsPerExecute(): Promise<number> {
  let queries = 0;
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    queries += 1;
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  try {
    await runner.execute({ key: 'count-round-trips', resource: 'count' }, async () => result);
  } finally {
    pg.Client.prototype.query = query;
  }
  return queries;
}

async function main(): Promise<void> {
  await migrate(pool, { schema });
  await pool.query(
    `create table ${floorTable} (key text primary key, state text not null, result bytea)`,
  );
  await pool.query(`create table ${target} (key text primary key, amount int not null)`);
  await pool.query(
    `create table ${idem} (key text primary key, state text not null, result bytea)`,
  );
  for (let n = 0; n < REPLAY_KEYS; n++) {
    const action = { key: `done-${n}`, resource: 'replay' };
    await runner.execute(action, async () => result);
    await pool.query({ ...claim, values: [`done-${n}`] });
    await pool.query({ ...record, values: [`done-${n}`, resultBytes] });
  }
  // Warm every connection's prepared statements and plpgsql plans.
  await measure(ops['Runner.execute']!, 32);
  await measure(ops['floor: 2 upserts']!, 32);
  await measure(ops['tx execute']!, 32);
  await measure(ops['hand-written idempotent tx']!, 32);
  await measure(ops['execute + writeFenced']!, 32);

  const rows: Array<{
    scenario: string;
    c: number;
    ours: number;
    floor: number;
    ratio: number;
    cpuRatio: number;
    target: number;
  }> = [];
  const scenarios = [
    ['execute vs 2 upserts', 'Runner.execute', 'floor: 2 upserts', TARGETS.execute],
    ['replay vs 1 select', 'acquire (replay)', 'floor: 1 select', TARGETS.replay],
    ['tx vs hand-written', 'tx execute', 'hand-written idempotent tx', TARGETS.handWritten],
    ['tx vs exec+fenced', 'tx execute', 'execute + writeFenced', TARGETS.fenced],
  ] as const;
  for (const [scenario, oursOp, peerOp, target] of scenarios) {
    if (only && !scenario.includes(only)) continue;
    for (const c of CONCURRENCIES) {
      rows.push({ scenario, c, target, ...(await pair(oursOp, peerOp, c)) });
    }
  }

  const trips = await roundTripsPerExecute();
  console.log(
    `\nPgStore bench (schema ${schema}, median of ${ROUNDS} paired rounds of ${ROUND_MS} ms)`,
  );
  console.log(
    `load average at the end: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log(
    `round trips per Runner.execute: ${trips} (acquire straight into applying + complete)\n`,
  );
  console.log(
    `${'scenario'.padEnd(22)} ${'callers'.padStart(7)} ${'ours ops/s'.padStart(11)} ${'peer ops/s'.padStart(12)} ${'ratio'.padStart(6)} ${'target'.padStart(7)}  met     ${'cpu ratio'.padStart(9)}`,
  );
  let allMet = true;
  for (const row of rows) {
    const { ratio } = row;
    const met = ratio >= row.target;
    allMet &&= met;
    console.log(
      `${row.scenario.padEnd(22)} ${String(row.c).padStart(7)} ${row.ours.toFixed(0).padStart(11)} ${row.floor.toFixed(0).padStart(12)} ${ratio.toFixed(2).padStart(6)} ${`>=${row.target}`.padStart(7)}  ${(met ? 'met' : 'MISSED').padEnd(6)}  ${(Number.isNaN(row.cpuRatio) ? 'n/a' : row.cpuRatio.toFixed(2)).padStart(9)}`,
    );
  }
  console.log(
    '\ncpu ratio (information): CPU per op of the peer over ours, this process plus the local',
  );
  console.log('database backends; steadier than throughput when the host is noisy.');
  console.log(`targets ${allMet ? 'met' : 'NOT all met'}`);
}

try {
  await main();
} finally {
  await pool.query(`drop schema if exists "${schema}" cascade`).catch(() => {});
  await pool.end();
}
