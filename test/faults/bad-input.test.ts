/**
 * Bad input, at every door an operator or a program can knock on: the public API (PgStore,
 * Runner), the `sideeffect` CLI and the ReconcileWorkflow's `resolve` signal. Each attempt must get
 * a clear typed error (API), exit code 2 for usage / 1 for a refusal (CLI), or a rejection recorded
 * in the `status` query while the workflow keeps waiting (signal); and the store's tables must be
 * byte-for-byte the same before and after. The table of what was tried is printed.
 */
import { WorkflowNotFoundError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeJson, type Lease, Runner, SideEffectError } from '../../src/core/index.js';
import type { ReconcileResolution } from '../../src/protocol/wire.js';
import { migrate, PgStore } from '../../src/store/postgres/index.js';
import { reconcileWorkflowId, resolveSignal, statusQuery } from '../../src/workflows/index.js';
import { runCli } from '../support/cli.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { TEMPORAL_ADDRESS } from '../support/temporal.js';
import { type Harness, startHarness, waitFor } from '../temporal/harness.js';

const TTL = 30_000;
const SQL_KEY = `x'); drop table keys; --`;
const LONG_KEY = 'k'.repeat(513);

interface Row {
  door: string;
  input: string;
  expected: string;
  got: string;
  unchanged: boolean;
}
const table: Row[] = [];

let db: FreshSchema;
let store: PgStore;
let h: Harness;
let lease: Lease;
const uncertain = { key: 'bad/uncertain', resource: 'bad-r1' };
const done = { key: 'bad/done', resource: 'bad-r2' };
const free = { key: 'bad/free', resource: 'bad-r3' };
const contested = { key: 'bad/contested', resource: 'bad-r4' };

/** Every row of every store table, in a stable order: what "nothing changed" is judged on. */
async function snapshot(): Promise<string> {
  const { rows } = await db.pool.query(`select json_build_object(
    'keys', (select json_agg(k order by key) from keys k),
    'resources', (select json_agg(r order by resource) from resources r),
    'events', (select json_agg(e order by id) from events e),
    'sink_fences', (select json_agg(s order by resource) from sink_fences s)) as all`);
  return JSON.stringify(rows[0].all);
}

function describeError(error: unknown): string {
  if (error instanceof SideEffectError) return `${error.name} ${error.code}`;
  return error instanceof Error ? `${error.name}: ${error.message}` : `threw ${String(error)}`;
}

const printable = (text: string) =>
  JSON.stringify(text.length > 40 ? `${text.slice(0, 24)}…(${text.length} chars)` : text);

beforeAll(async () => {
  db = await freshSchema('faults_input');
  db.pool.on('error', () => {});
  await migrate(db.pool, { schema: db.schema });
  store = new PgStore({ pool: db.pool, schema: db.schema });
  h = await startHarness('faults-input', { store, effects: {}, ttlMs: TTL });

  const granted = await store.acquire(uncertain, TTL, { applying: true });
  if (granted.outcome !== 'granted') throw new Error('setup: no grant');
  lease = granted.lease;
  await store.markUncertain(uncertain, lease, 'test: the gateway timed out');
  const runner = new Runner(store, { ttlMs: TTL });
  await runner.execute(done, async () => encodeJson({ receipt: 'r-1' }));
  const held = await store.acquire(free, TTL);
  if (held.outcome !== 'granted') throw new Error('setup: no grant');
  await store.release(free, held.lease);
  const other = await store.acquire(contested, TTL, { applying: true });
  if (other.outcome !== 'granted') throw new Error('setup: no grant');
  await store.markUncertain(contested, other.lease, 'test: the gateway timed out');
  for (const action of [uncertain, contested]) {
    await h.client.workflow.start('ReconcileWorkflow', {
      taskQueue: h.taskQueue,
      workflowId: reconcileWorkflowId(action.key),
      args: [{ ...action, reason: 'test: the gateway timed out' }],
    });
    await h.waitForReconcile(action.key, 'waiting');
  }
});

afterAll(async () => {
  if (table.length > 0) {
    const header: Row = {
      door: 'door',
      input: 'input',
      expected: 'expected',
      got: 'got',
      unchanged: true,
    };
    const cells = (r: Row) => [
      r.door,
      r.input,
      r.expected,
      r.got,
      r === header ? 'store' : r.unchanged ? 'unchanged' : 'CHANGED',
    ];
    const rows = [header, ...table].map(cells);
    const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
    const line = (row: string[]) => `| ${row.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
    process.stdout.write(
      `\nbad input\n${[line(rows[0]!), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.slice(1).map(line)].join('\n')}\n`,
    );
  }
  await h?.close();
  await db?.drop();
});

describe('bad input changes nothing', () => {
  it('the public API: a typed error for each, tables unchanged', async () => {
    const runner = new Runner(store, { ttlMs: TTL });
    const ok = { key: 'bad/new', resource: 'bad-r9' };
    const cases: Array<[string, string, () => Promise<unknown>]> = [
      ['acquire: empty key', 'INVALID_ACTION', () => store.acquire({ ...ok, key: '' }, TTL)],
      [
        'acquire: 513-byte key',
        'INVALID_ACTION',
        () => store.acquire({ ...ok, key: LONG_KEY }, TTL),
      ],
      ['acquire: NUL in key', 'INVALID_ACTION', () => store.acquire({ ...ok, key: 'a\0b' }, TTL)],
      [
        'acquire: lone surrogate',
        'INVALID_ACTION',
        () => store.acquire({ ...ok, key: 'a\uD800' }, TTL),
      ],
      [
        'acquire: key is a number',
        'INVALID_ACTION',
        () => store.acquire({ ...ok, key: 7 as never }, TTL),
      ],
      [
        'acquire: resource null',
        'INVALID_ACTION',
        () => store.acquire({ ...ok, resource: null as never }, TTL),
      ],
      [
        'acquire: payload is a string',
        'INVALID_ACTION',
        () => store.acquire({ ...ok, payload: '{}' as never }, TTL),
      ],
      [
        'acquire: retrySafety "maybe"',
        'INVALID_ACTION',
        () => store.acquire({ ...ok, retrySafety: 'maybe' as never }, TTL),
      ],
      ['acquire: ttl "1000" (string)', 'INVALID_ACTION', () => store.acquire(ok, '1000' as never)],
      ['acquire: ttl NaN', 'INVALID_ACTION', () => store.acquire(ok, Number.NaN)],
      [
        'acquire: done key, SQL resource',
        'KEY_CONFLICT',
        () => store.acquire({ ...done, resource: SQL_KEY }, TTL),
      ],
      [
        'acquire: done key, other payload',
        'KEY_CONFLICT',
        () => store.acquire({ ...done, payload: new Uint8Array([1]) }, TTL),
      ],
      [
        'complete: stale lease',
        'FENCE_STALE',
        () => store.complete(uncertain, lease, encodeJson(1)),
      ],
      ['release: lease of another resource', 'FENCE_STALE', () => store.release(done, lease)],
      [
        'markUncertain: empty reason',
        'INVALID_ACTION',
        () => store.markUncertain(uncertain, lease, ''),
      ],
      [
        'resolve: SQL key',
        'NOT_UNCERTAIN',
        () => store.resolveUncertain(SQL_KEY, { applied: false, reason: 'x' }),
      ],
      [
        'resolve: unknown key',
        'NOT_UNCERTAIN',
        () => store.resolveUncertain('bad/nope', { applied: false, reason: 'x' }),
      ],
      [
        'resolve: key that is free',
        'NOT_UNCERTAIN',
        () => store.resolveUncertain(free.key, { applied: true, reason: 'x' }),
      ],
      [
        'resolve: applied "yes"',
        'INVALID_ACTION',
        () => store.resolveUncertain(uncertain.key, { applied: 'yes' as never, reason: 'x' }),
      ],
      [
        'resolve: no reason',
        'INVALID_ACTION',
        () => store.resolveUncertain(uncertain.key, { applied: true } as never),
      ],
      [
        'resolve: reason with NUL',
        'INVALID_ACTION',
        () => store.resolveUncertain(uncertain.key, { applied: false, reason: 'a\0' }),
      ],
      [
        'resolve: 5000-byte reason',
        'INVALID_ACTION',
        () => store.resolveUncertain(uncertain.key, { applied: false, reason: 'r'.repeat(5000) }),
      ],
      [
        'resolve: result not bytes',
        'INVALID_ACTION',
        () =>
          store.resolveUncertain(uncertain.key, {
            applied: true,
            reason: 'x',
            result: { payload: 'r' as never },
          }),
      ],
      [
        'Runner: no store',
        'NO_STORE',
        () => new Runner(undefined, { ttlMs: TTL }).execute(ok, async () => encodeJson(1)),
      ],
      [
        'Runner: ttl 0',
        'INVALID_ACTION',
        () => new Runner(store, { ttlMs: 0 }).execute(ok, async () => encodeJson(1)),
      ],
      [
        'Runner.resolve: lone surrogate',
        'INVALID_ACTION',
        () => runner.resolve({ key: '\uDC00', resource: 'r' }, { applied: false, reason: 'x' }),
      ],
    ];
    for (const [input, expected, call] of cases) {
      const before = await snapshot();
      // A Promise-returning call must reject, not throw before returning.
      let synchronous = false;
      let promise: Promise<unknown>;
      try {
        promise = call();
      } catch (error) {
        synchronous = true;
        promise = Promise.reject(error);
      }
      const got = await promise.then(
        (value) => `resolved ${JSON.stringify(value)}`,
        (error: unknown) => describeError(error),
      );
      const unchanged = (await snapshot()) === before;
      table.push({
        door: 'API',
        input,
        expected,
        got: synchronous ? `${got} (thrown, not rejected)` : got,
        unchanged,
      });
      expect.soft(got, input).toMatch(new RegExp(`Error ${expected}$`));
      expect.soft(synchronous, `${input}: rejected, not thrown`).toBe(false);
      expect.soft(unchanged, `${input}: store unchanged`).toBe(true);
    }

    // A conflicting second resolution of a decided key: the first verdict stands, nothing moves.
    const before = await snapshot();
    const second = await store.resolveUncertain(done.key, {
      applied: false,
      reason: 'second opinion',
    });
    const unchanged = (await snapshot()) === before;
    table.push({
      door: 'API',
      input: 'resolve: done key, conflicting verdict',
      expected: 'replayed, first stands',
      got: `${second.outcome} applied=${second.applied}`,
      unchanged,
    });
    expect(second).toMatchObject({ outcome: 'replayed', applied: true });
    expect(unchanged).toBe(true);
  });

  it('the CLI: exit 2 for usage errors, 1 for refusals, tables unchanged', async () => {
    const cli = (args: string[]) =>
      runCli(args, { DATABASE_URL: databaseUrl(), SIDEEFFECT_SCHEMA: db.schema, TEMPORAL_ADDRESS });
    const cases: Array<[number, string[]]> = [
      [2, ['frobnicate']],
      [2, ['resolve']],
      [2, ['resolve', uncertain.key, '--applied', '--not-applied', '--reason', 'x']],
      [2, ['resolve', uncertain.key, '--applied']],
      [2, ['resolve', uncertain.key, '--applied', '--reason', '   ']],
      [2, ['resolve', uncertain.key, '--not-applied', '--reason', 'x', '--result', '1']],
      [2, ['resolve', uncertain.key, '--applied', '--reason', 'x', '--result', '{not json']],
      [2, ['resolve', uncertain.key, '--applied', '--reason', 'x', '--color', 'red']],
      // Which attempt was checked is required: a verdict must not land on a later one.
      [2, ['resolve', uncertain.key, '--not-applied', '--reason', 'x']],
      [2, ['list', '--limit', '-1']],
      [2, ['list', '--limit', 'ten']],
      [2, ['list', '--state', `uncertain'; --`]],
      [2, ['show', 'a', 'b']],
      [2, ['purge', '--older-than', 'yesterday']],
      [1, ['resolve', '--any-attempt', LONG_KEY, '--not-applied', '--reason', 'x']],
      [1, ['resolve', '--any-attempt', SQL_KEY, '--not-applied', '--reason', 'x']],
      [1, ['show', SQL_KEY]],
      [
        1,
        ['resolve', '--any-attempt', 'bad/nope', '--applied', '--result', 'null', '--reason', 'x'],
      ],
      [1, ['resolve', '--any-attempt', free.key, '--applied', '--result', 'null', '--reason', 'x']],
      [
        1,
        [
          'resolve',
          '--any-attempt',
          done.key,
          '--not-applied',
          '--reason',
          'a conflicting second verdict',
        ],
      ],
    ];
    for (const [expected, args] of cases) {
      const before = await snapshot();
      const { code, stdout, stderr } = await cli(args);
      const unchanged = (await snapshot()) === before;
      const input = `sideeffect ${args.map(printable).join(' ')}`;
      // Usage errors and refusals explain themselves on stderr; a lost race reports on stdout.
      const said = (stderr.trim() || stdout.trim()).split('\n')[0]!;
      table.push({
        door: 'CLI',
        input,
        expected: `exit ${expected}`,
        got: `exit ${code}: ${said.slice(0, 60)}`,
        unchanged,
      });
      expect.soft(code, input).toBe(expected);
      expect.soft(said, input).not.toBe('');
      expect.soft(unchanged, `${input}: store unchanged`).toBe(true);
    }
    // Twenty command lines, in-process (test/support/cli.ts); the resolves also reach Temporal.
  }, 120_000);

  it('the resolve signal: every malformed payload is recorded, the workflow keeps waiting', async () => {
    const reconcile = h.reconcile(uncertain.key);
    const payloads: unknown[] = [
      null,
      'applied',
      42,
      [],
      {},
      { applied: 'yes', reason: 'looked' },
      { applied: true },
      { applied: true, reason: '' },
      { applied: false, reason: '   ' },
      { applied: false, reason: 'a\0b' },
      { applied: false, reason: 'a\uD800b' },
      { applied: false, reason: 'r'.repeat(5000) },
      { applied: true, reason: 'ok', result: 1, extra: true },
      { applied: true, reason: 'ok', by: 42 },
      { applied: false, reason: SQL_KEY, by: 'b'.repeat(600) },
      { applied: 1, reason: SQL_KEY },
    ];
    for (const [index, payload] of payloads.entries()) {
      const before = await snapshot();
      await reconcile.signal(resolveSignal, payload as never);
      const status = await waitFor(
        async () => {
          const s = await reconcile.query(statusQuery);
          return s.rejected.length === index + 1 ? s : undefined;
        },
        `signal ${index + 1} to be rejected`,
      );
      const unchanged = (await snapshot()) === before;
      const rejection = status.rejected.at(-1)!;
      const input = JSON.stringify(payload)?.slice(0, 60) ?? String(payload);
      table.push({
        door: 'signal',
        input,
        expected: 'rejected, waiting',
        got: `${status.state}: ${rejection.error.slice(0, 60)}`,
        unchanged,
      });
      // Kept whole up to 2,048 characters of JSON; longer inputs as their first 2,048 characters.
      const json = JSON.stringify(payload);
      if (json !== undefined && json.length > 2048) {
        expect(rejection.input).toBe(json.slice(0, 2048));
        expect(rejection.inputChars).toBe(json.length);
      } else {
        expect(rejection.input).toEqual(payload);
      }
      expect(status.state).toBe('waiting');
      expect(unchanged).toBe(true);
    }
    expect((await reconcile.describe()).status.name).toBe('RUNNING');
    expect((await store.inspect(uncertain.key))?.state).toBe('uncertain');

    // A valid verdict decides; the key is free (not applied) and the workflow returns it.
    await reconcile.signal(resolveSignal, {
      applied: false,
      reason: 'not in the ledger',
      by: 't',
      fence: (await store.inspect(uncertain.key))!.fence,
    });
    const resolution = (await reconcile.result()) as ReconcileResolution;
    expect(resolution).toMatchObject({ applied: false, decidedBy: 'signal' });
    expect((await store.inspect(uncertain.key))?.state).toBe('free');

    // A second, conflicting verdict on the closed workflow: a typed error, the store unchanged.
    const before = await snapshot();
    const late = await reconcile
      .signal(resolveSignal, { applied: true, result: 1, reason: 'second opinion' })
      .then(
        () => 'accepted',
        (error: unknown) =>
          error instanceof WorkflowNotFoundError ? 'WorkflowNotFoundError' : String(error),
      );
    const unchanged = (await snapshot()) === before;
    table.push({
      door: 'signal',
      input: 'conflicting verdict after the decision',
      expected: 'WorkflowNotFoundError',
      got: late,
      unchanged,
    });
    expect(late).toBe('WorkflowNotFoundError');
    expect(unchanged).toBe(true);
  });

  it('two conflicting verdicts sent together: the first is recorded, the second changes nothing', async () => {
    const reconcile = h.reconcile(contested.key);
    await reconcile.signal(resolveSignal, {
      applied: true,
      result: { receipt: 'first' },
      reason: 'found it in the bank',
      by: 'ann',
      fence: (await store.inspect(contested.key))!.fence,
    });
    await reconcile.signal(resolveSignal, {
      applied: false,
      reason: 'not in the bank',
      by: 'bob',
      fence: (await store.inspect(contested.key))!.fence,
    });
    const resolution = (await reconcile.result()) as ReconcileResolution;
    const record = await store.inspect(contested.key);
    const status = await reconcile.query(statusQuery);
    const secondRecorded = status.rejected.some(
      (r) => (r.input as { by?: string } | null)?.by === 'bob',
    );
    table.push({
      door: 'signal',
      input: 'conflicting verdict while the first is recorded',
      expected: 'first stands',
      got: `first stands: ${resolution.by === 'ann'}; second in status.rejected: ${secondRecorded}`,
      unchanged: record?.state === 'done',
    });
    expect(resolution).toMatchObject({ applied: true, result: { receipt: 'first' }, by: 'ann' });
    // The loser is told why nothing happened, where an operator looks.
    expect(secondRecorded).toBe(true);
    expect(record?.state).toBe('done');
    expect(JSON.parse(new TextDecoder().decode(record!.result!.payload))).toEqual({
      receipt: 'first',
    });
    expect((await store.events(contested.key)).map((e) => `${e.from}->${e.to}`)).toEqual([
      'free->applying',
      'applying->uncertain',
      'uncertain->done',
    ]);
  });
});
