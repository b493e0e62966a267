/**
 * `npm start`: the whole idea on one machine. Starts the Temporal dev server
 * if none answers, migrates Postgres, runs a worker, and walks through a
 * payments scenario showing applied, replayed, contended and uncertain. It
 * ends on a charge whose outcome nobody knows, waiting in the Temporal UI for
 * a person's verdict, and exits once that verdict arrives.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Connection, type WorkflowHandle } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import pg from 'pg';
import { maskConnectionString } from '../src/core/mask.js';
import { connectionConfig, migrate, PgFencedSink, PgStore } from '../src/store/postgres/index.js';
import { clusterSettings, SideEffectPlugin } from '../src/worker/index.js';
import {
  reconcileWorkflowId,
  type SideEffectOutcome,
  statusQuery,
} from '../src/workflows/index.js';
import { type Charge, type ChargeInput, chargeEffect } from './effects.js';
import { resolveInstructions } from './instructions.js';

/** Temporal's standard client configuration: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TLS, TEMPORAL_PROFILE. */
const TEMPORAL = clusterSettings();
const TEMPORAL_ADDRESS = TEMPORAL.connectionOptions.address;
const UI = process.env.TEMPORAL_UI_URL || 'http://localhost:8233';
/**
 * DATABASE_URL, else the PG* variables, as the worker and the CLI read them; with neither set,
 * the local Postgres of a fresh checkout.
 */
const DATABASE = Object.keys(process.env).some(
  (name) => (name === 'DATABASE_URL' || name.startsWith('PG')) && process.env[name],
)
  ? connectionConfig()
  : { connectionString: 'postgres://postgres@127.0.0.1:5432/postgres' };
const DATABASE_SHOWN = DATABASE.connectionString
  ? maskConnectionString(DATABASE.connectionString)
  : `${DATABASE.host ?? 'localhost'}:${DATABASE.port ?? 5432}/${DATABASE.database ?? DATABASE.user ?? ''} (PG* variables)`;
const SCHEMA = process.env.SIDEEFFECT_SCHEMA || 'sideeffect';
const TASK_QUEUE = 'sideeffect-demo';
const run = randomBytes(3).toString('hex');
const say = (line = '') => process.stdout.write(`${line}\n`);

async function main(): Promise<void> {
  // Contention and the lost response below are expected: keep the worker's own warnings out of the walkthrough.
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  say(`sideeffect demo, run ${run}`);
  await ensureTemporal();
  const pool = await connectPostgres();
  const applied = await migrate(pool, { schema: SCHEMA });
  const bankTable = `${SCHEMA}.demo_bank`;
  await pool.query(
    `create table if not exists ${bankTable} (id bigserial primary key, key text not null, card text not null,
       cents int not null, fence bigint not null, at timestamptz not null default now())`,
  );
  say(
    `  Postgres  ${DATABASE_SHOWN} schema ${SCHEMA}${applied.length ? ` (migrated ${applied.join(', ')})` : ''}`,
  );

  const store = new PgStore({ pool, schema: SCHEMA });
  const bank = new PgFencedSink({ pool, schema: SCHEMA });
  const plugin = new SideEffectPlugin({
    store,
    effects: { charge: chargeEffect(bank, bankTable) },
    ttlMs: 3_000,
    sweepEveryMs: 10_000,
  });
  const connection = await NativeConnection.connect(TEMPORAL.connectionOptions);
  const worker = await Worker.create({
    connection,
    namespace: TEMPORAL.namespace,
    taskQueue: TASK_QUEUE,
    workflowsPath: fileURLToPath(new URL('./workflows.ts', import.meta.url)),
    plugins: [plugin],
  });
  const running = worker.run();
  say(`  Worker    task queue ${TASK_QUEUE}`);
  say();

  const client = plugin.client;
  const order = (name: string) => `demo-${run}-order-${name}`;
  const pay = (name: string, input: Omit<ChargeInput, 'order'>): Promise<WorkflowHandle> =>
    client.workflow.start('PaymentWorkflow', {
      taskQueue: TASK_QUEUE,
      workflowId: order(name),
      args: [{ order: name, ...input }],
    });
  const outcome = (handle: WorkflowHandle) => handle.result() as Promise<SideEffectOutcome<Charge>>;
  const bankCharges = async (key: string) =>
    (
      await pool.query<{ id: string }>(
        `select 'ch_' || id as id from ${bankTable} where key = $1 order by id`,
        [key],
      )
    ).rows.map((r) => r.id);
  const bankRows = async (key: string) => (await bankCharges(key)).length;
  const summary: string[][] = [];

  step(1, 'applied', 'order A charges card 1 with 12.50');
  const a = await outcome(await pay('A', { card: `${run}-1`, cents: 1250 }));
  done(`${a.outcome}: ${a.result.chargeId} (key ${a.key})`);
  summary.push(['A', 'applied', a.result.chargeId, String(await bankRows(a.key))]);

  step(2, 'replayed', 'order A is submitted again (same workflow id, so the same key)');
  const again = await outcome(await pay('A', { card: `${run}-1`, cents: 1250 }));
  done(
    `${again.outcome}: ${again.result.chargeId}, the bank still has ${await bankRows(again.key)} charge for it`,
  );
  summary.push([
    'A again',
    again.outcome,
    again.result.chargeId,
    String(await bankRows(again.key)),
  ]);

  step(3, 'contended', 'orders B and C charge card 2 at the same time (the bank takes 2 s)');
  const b = await pay('B', { card: `${run}-2`, cents: 800, bankDelayMs: 2_000 });
  await new Promise((resolve) => setTimeout(resolve, 500));
  const c = await pay('C', { card: `${run}-2`, cents: 300 });
  const [rb, rc] = await Promise.all([outcome(b), outcome(c)]);
  const waited = [rb, rc].find((r) => r.result.attempt > 1);
  done(
    waited
      ? `one held card 2; the other was contended (SideEffectContended) and applied on attempt ${waited.result.attempt}`
      : 'both applied one after the other',
  );
  summary.push([
    'B',
    rb.result.attempt > 1 ? 'contended, then applied' : 'applied',
    rb.result.chargeId,
    String(await bankRows(rb.key)),
  ]);
  summary.push([
    'C',
    rc.result.attempt > 1 ? 'contended, then applied' : 'applied',
    rc.result.chargeId,
    String(await bankRows(rc.key)),
  ]);

  step(4, 'uncertain', 'order D: the bank takes the charge, then the response is lost');
  const d = await pay('D', { card: `${run}-3`, cents: 4200, loseResponse: true });
  const key = `${order('D')}/charge`;
  const reconcile = client.workflow.getHandle(reconcileWorkflowId(key));
  const status = await waitForWaiting(reconcile);
  done(`uncertain: ${status.reason}`);
  summary.push(['D', 'uncertain, waiting for a person', '?', String(await bankRows(key))]);

  say();
  say(table(['ORDER', 'OUTCOME', 'CHARGE', 'BANK ROWS'], summary));
  say();
  const charges = await bankCharges(key);
  // The attempt judged: a verdict that names it cannot decide a later attempt of the same key.
  const fence = status.fence ?? (await store.inspect(key))?.fence ?? 0;
  say('Order D is blocked: retrying it blindly could charge twice.');
  const { text } = resolveInstructions({
    uiUrl: UI,
    namespace: TEMPORAL.namespace,
    key,
    resource: `card:${run}-3`,
    verdict: {
      applied: true,
      result: { chargeId: charges[0] ?? 'none', attempt: 1 },
      reason: 'found in the bank ledger',
      by: 'you',
      fence,
    },
    downstream: `the bank: ${charges.length} charge(s) for key ${key}: ${charges.join(', ') || 'none'}`,
  });
  say(text);
  say();
  say(
    'Waiting for the resolve signal... (Ctrl-C to leave it waiting; the workflow keeps waiting in Temporal)',
  );

  const final = await outcome(d);
  const resolution = await reconcile.result();
  say();
  say(
    `Resolved by ${resolution.by ?? resolution.decidedBy}: ${resolution.applied ? 'applied' : 'not applied'} (${resolution.reason})`,
  );
  say(
    `Order D finished: ${final.outcome}, charge ${final.result.chargeId}; the bank has ${await bankRows(key)} charge(s) for it`,
  );
  say(`Inspect it: npm run sideeffect -- show '${key}'`);

  worker.shutdown();
  await running;
  await connection.close();
  await bank.close();
  await store.close();
  await pool.end();
}

function step(n: number, outcome: string, what: string): void {
  process.stdout.write(`[${n}/4] ${outcome.padEnd(10)} ${what} ... `);
}

function done(what: string): void {
  say(what);
}

async function ensureTemporal(): Promise<void> {
  if (!(await temporalAnswers())) {
    say(
      `  Temporal  nothing answers at ${TEMPORAL_ADDRESS}; starting the dev server with ./temporal-dev.sh`,
    );
    const script = fileURLToPath(new URL('../temporal-dev.sh', import.meta.url));
    const started = spawnSync(script, [], { stdio: 'inherit' });
    if (started.status !== 0)
      fail(`./temporal-dev.sh failed (exit ${started.status}); see its message above.`);
  }
  say(`  Temporal  ${TEMPORAL_ADDRESS}, web UI ${UI}`);
}

async function temporalAnswers(): Promise<boolean> {
  try {
    const connection = await Connection.connect({
      ...TEMPORAL.connectionOptions,
      connectTimeout: 2_000,
    });
    try {
      await connection.workflowService.getSystemInfo({});
      return true;
    } finally {
      await connection.close();
    }
  } catch {
    return false;
  }
}

async function connectPostgres(): Promise<pg.Pool> {
  const pool = new pg.Pool({ ...DATABASE, connectionTimeoutMillis: 5_000 });
  pool.on('error', () => {});
  try {
    await pool.query('select 1');
    return pool;
  } catch (error) {
    await pool.end().catch(() => {});
    return fail(
      `Postgres does not answer at ${DATABASE_SHOWN} (${(error as Error).message}).\n` +
        'Start Postgres there, or set DATABASE_URL=postgres://user@host:5432/database (or the PG* variables; password in PGPASSWORD) and run npm start again.',
    );
  }
}

async function waitForWaiting(handle: WorkflowHandle) {
  for (let tries = 0; ; tries++) {
    try {
      const status = await handle.query(statusQuery);
      if (status.state === 'waiting') return status;
    } catch (error) {
      if (tries > 300) throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

function table(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    `  ${cells.map((c, i) => c.padEnd(widths[i]!)).join('  ')}`.trimEnd();
  return [line(head), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/** Every failure path ends here, so no message of the demo shows a connection string's password. */
function fail(message: string): never {
  process.stderr.write(`\nsideeffect demo: ${maskConnectionString(message)}\n`);
  process.exit(1);
}

main().catch((error: unknown) =>
  fail(error instanceof Error ? (error.stack ?? error.message) : String(error)),
);
