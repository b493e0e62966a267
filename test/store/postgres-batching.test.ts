/**
 * Batching (issue 33): one process's concurrent calls of one kind share one statement, and each
 * key is answered exactly what it would be alone. Statements are counted by the pool's checkouts
 * (every store statement takes one). Calls made in one turn of the event loop go together, so a
 * test puts keys in one statement by making the calls without awaiting in between.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Acquisition,
  type Action,
  KeyConflictError,
  type Lease,
  Runner,
  StoreUnavailableError,
} from '../../src/core/index.js';
import { PgStore } from '../../src/store/postgres/index.js';
import { bytes, text } from '../support/bytes.js';
import { type PgHarness, pgHarness, sidePool } from './pg-support/harness.js';

const TTL = 60_000;

let h: PgHarness;
let store: PgStore;
let side: pg.Pool;
beforeAll(async () => {
  h = await pgHarness('pg_batching', { batching: 'on' });
  store = new PgStore({ pool: h.db.pool, schema: h.db.schema });
  side = sidePool(h.db);
  // A key named `boom...` cannot be written (anything a function may raise for one key); one
  // named `slow-acquire...` takes long to create and one named `slow-complete...` to complete, so
  // their statement can be killed while it runs.
  await h.db.pool.query(`
    create function test_keys_hook() returns trigger language plpgsql as $$
    begin
      if new.key like 'boom%' then raise exception 'test: % cannot be written', new.key; end if;
      if new.key like 'slow-acquire%' and tg_op = 'INSERT'
         or new.key like 'slow-complete%' and new.state = 'done' then
        perform pg_sleep(30);
      end if;
      return new;
    end $$;
    create trigger test_keys_hook before insert or update on keys
      for each row execute function test_keys_hook();
  `);
});
afterAll(async () => {
  await side?.end();
  await h?.close();
});

/** How many statements the store sent while `run` ran, and what it returned. */
async function counted<T>(run: () => Promise<T>): Promise<{ statements: number; value: T }> {
  let statements = 0;
  const count = () => {
    statements += 1;
  };
  h.db.pool.on('acquire', count);
  try {
    const value = await run();
    return { statements, value };
  } finally {
    h.db.pool.off('acquire', count);
  }
}

const settled = <T>(promise: Promise<T>) =>
  promise.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );

async function granted(a: Action): Promise<Lease> {
  const got = await store.acquire(a, TTL, { applying: true });
  if (got.outcome !== 'granted') throw new Error(`expected granted, got ${got.outcome}`);
  return got.lease;
}

const fenceOf = async (resource: string) =>
  Number(
    (await h.db.pool.query('select fence from resources where resource = $1', [resource])).rows[0]
      ?.fence ?? 0,
  );

describe('calls of one kind share statements', () => {
  it('concurrent executes: each key applied with its own result and fence, in a few statements', async () => {
    const runner = new Runner(store, { ttlMs: TTL });
    for (let i = 0; i < 16; i++)
      await h.db.pool.query(`insert into resources (resource) values ('many-${i}')`);
    const { statements, value } = await counted(() =>
      Promise.all(
        Array.from({ length: 16 }, (_, i) =>
          runner.execute({ key: `many-${i}`, resource: `many-${i}` }, async () => ({
            payload: bytes(`result ${i}`),
          })),
        ),
      ),
    );
    expect(value.map((e) => e.outcome)).toEqual(Array(16).fill('applied'));
    // One statement of acquires and one of completes; one key at a time would be 32.
    expect(statements).toBeLessThanOrEqual(4);
    for (let i = 0; i < 16; i++) {
      const record = await store.inspect(`many-${i}`);
      expect(record).toMatchObject({ state: 'done', fence: 1 });
      expect(text(record!.result!.payload)).toBe(`result ${i}`);
    }
  });

  it('concurrent replays: each done key answered with its own result, in one statement', async () => {
    const runner = new Runner(store, { ttlMs: TTL });
    for (let i = 0; i < 24; i++) {
      await runner.execute({ key: `replay-${i}`, resource: 'replays' }, async () => ({
        payload: bytes(`first ${i}`),
      }));
    }
    const { statements, value } = await counted(() =>
      Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          store.acquire({ key: `replay-${i}`, resource: 'replays' }, TTL),
        ),
      ),
    );
    expect(statements).toBe(1);
    value.forEach((answer, i) => {
      expect(answer.outcome).toBe('replayed');
      if (answer.outcome === 'replayed') expect(text(answer.result.payload)).toBe(`first ${i}`);
    });
    // A storm of replays of one key is one read too.
    const storm = await counted(() =>
      Promise.all(
        Array.from({ length: 24 }, () =>
          store.acquire({ key: 'replay-7', resource: 'replays' }, TTL),
        ),
      ),
    );
    expect(storm.statements).toBe(1);
    expect(storm.value.map((answer) => answer.outcome)).toEqual(Array(24).fill('replayed'));
  });

  it('concurrent inspects: the same records as one at a time, in one statement', async () => {
    const keys = ['many-0', 'nobody', 'many-1', 'replay-3', 'many-0'];
    const alone = [];
    for (const key of keys) alone.push(await store.inspect(key));
    const { statements, value } = await counted(() =>
      Promise.all(keys.map((key) => store.inspect(key))),
    );
    expect(statements).toBe(1);
    expect(value).toEqual(alone);
    expect(value[1]).toBeUndefined();
  });

  it('concurrent renew, markUncertain and release of several holders: each as alone', async () => {
    const leases = await Promise.all(
      ['renew', 'mark', 'release'].flatMap((kind) =>
        [0, 1].map((i) => granted({ key: `${kind}-${i}`, resource: `${kind}-${i}` })),
      ),
    );
    const [r0, r1, m0, m1, l0, l1] = leases as [Lease, Lease, Lease, Lease, Lease, Lease];
    await h.advance(1_000);
    const { statements, value } = await counted(() =>
      Promise.all([
        store.renew({ key: 'renew-0', resource: 'renew-0' }, r0, 5 * TTL),
        store.renew({ key: 'renew-1', resource: 'renew-1' }, r1, 5 * TTL),
        store.markUncertain({ key: 'mark-0', resource: 'mark-0' }, m0, 'why 0'),
        store.markUncertain({ key: 'mark-1', resource: 'mark-1' }, m1, 'why 1'),
        store.release({ key: 'release-0', resource: 'release-0' }, l0),
        store.release({ key: 'release-1', resource: 'release-1' }, l1),
      ]),
    );
    expect(statements).toBe(3);
    const [renewed0, renewed1] = value;
    expect(renewed0.expiresAt).toBe(r0.expiresAt + 1_000 + 4 * TTL);
    expect(renewed1.expiresAt).toBe(r1.expiresAt + 1_000 + 4 * TTL);
    expect(await store.inspect('mark-1')).toMatchObject({ state: 'uncertain', reason: 'why 1' });
    expect(await store.inspect('release-0')).toMatchObject({ state: 'free' });
    // Each was recorded as alone: one event each, by its own actor.
    expect((await store.events('mark-0')).at(-1)).toMatchObject({
      from: 'applying',
      to: 'uncertain',
      reason: 'why 0',
      by: 'markUncertain',
    });
  });

  it('maxKeys bounds the keys of one statement', async () => {
    const small = new PgStore({ pool: h.db.pool, schema: h.db.schema, batching: { maxKeys: 4 } });
    const { statements, value } = await counted(() =>
      Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          small.acquire({ key: `cap-${i}`, resource: `cap-${i}` }, TTL),
        ),
      ),
    );
    expect(value.map((a) => a.outcome)).toEqual(Array(10).fill('granted'));
    expect(statements).toBe(3);
  });

  it('batching: false sends one statement per call', async () => {
    const off = new PgStore({ pool: h.db.pool, schema: h.db.schema, batching: false });
    const { statements } = await counted(() =>
      Promise.all(Array.from({ length: 5 }, (_, i) => off.inspect(`many-${i}`))),
    );
    expect(statements).toBe(5);
  });

  it('refuses a batching option it cannot follow, with a typed error', () => {
    for (const batching of [{ maxKeys: 0 }, { maxKeys: 65 }, { maxKeys: 1.5 }, 'yes', null]) {
      expect(
        () =>
          new PgStore({
            pool: h.db.pool,
            schema: h.db.schema,
            batching: batching as never,
          }),
      ).toThrow(expect.objectContaining({ code: 'INVALID_ACTION', field: 'batching' }));
    }
  });
});

describe('each key of a statement is answered as alone', () => {
  it('two first acquires of one resource: the first to arrive is granted, the second contended', async () => {
    for (const [first, second] of [
      ['one-a', 'one-b'],
      ['two-b', 'two-a'],
    ] as const) {
      const resource = `shared-${first}`;
      const { statements, value } = await counted(() =>
        Promise.all([
          store.acquire({ key: first, resource }, TTL),
          store.acquire({ key: second, resource }, TTL),
        ]),
      );
      expect(statements).toBe(1);
      const [a, b] = value as [Acquisition, Acquisition];
      expect(a).toMatchObject({ outcome: 'granted', lease: { fence: 1 } });
      expect(b.outcome).toBe('contended');
      if (b.outcome === 'contended') expect(b.retryAfterMs).toBe(TTL);
      expect(await store.inspect(second)).toBeUndefined();
    }
  });

  it('one key twice: on one resource in one statement, granted then contended; on two resources one after the other, in arrival order', async () => {
    const a = { key: 'twice', resource: 'twice' };
    const same = await counted(() => Promise.all([store.acquire(a, TTL), store.acquire(a, TTL)]));
    expect(same.statements).toBe(1);
    expect(same.value.map((v) => v.outcome)).toEqual(['granted', 'contended']);
    // The second resource sorts first: in one statement it would have been judged first.
    const two = await counted(() =>
      Promise.all(
        [
          store.acquire({ key: 'elsewhere-twice', resource: 'z-second' }, TTL),
          store.acquire({ key: 'elsewhere-twice', resource: 'a-first' }, TTL),
        ].map(settled),
      ),
    );
    expect(two.value[0]).toMatchObject({ value: { outcome: 'granted' } });
    expect(two.value[1]).toMatchObject({ error: expect.any(KeyConflictError) });
    // One statement each, and the conflict's binding read.
    expect(two.statements).toBe(3);
  });

  it('a key conflict, a key that cannot be written and a stale fence fail that call alone', async () => {
    await new Runner(store, { ttlMs: TTL }).execute(
      { key: 'bound', resource: 'home' },
      async () => ({ payload: bytes('x') }),
    );
    const { statements, value } = await counted(() =>
      Promise.all(
        [
          store.acquire({ key: 'ok-1', resource: 'mixed-1' }, TTL),
          store.acquire({ key: 'bound', resource: 'elsewhere' }, TTL),
          store.acquire({ key: 'boom-1', resource: 'mixed-2' }, TTL),
          store.acquire({ key: 'ok-2', resource: 'mixed-3' }, TTL),
        ].map(settled),
      ),
    );
    expect(value[0]).toMatchObject({ value: { outcome: 'granted' } });
    expect(value[3]).toMatchObject({ value: { outcome: 'granted' } });
    const conflict = (value[1] as { error: unknown }).error;
    expect(conflict).toBeInstanceOf(KeyConflictError);
    expect((conflict as KeyConflictError).field).toBe('resource');
    // Raised for that key alone: asked again alone, it fails as it would have alone.
    const boom = (value[2] as { error: unknown }).error;
    expect(boom).toBeInstanceOf(StoreUnavailableError);
    expect(String((boom as StoreUnavailableError).cause)).toMatch(/boom-1 cannot be written/);
    expect(await store.inspect('boom-1')).toBeUndefined();
    expect(await fenceOf('mixed-2')).toBe(0);
    // One statement for the four, the conflict's binding read, and boom-1 asked alone.
    expect(statements).toBe(3);

    const leases = [
      await granted({ key: 'c-1', resource: 'c-1' }),
      await granted({ key: 'c-2', resource: 'c-2' }),
      await granted({ key: 'c-3', resource: 'c-3' }),
    ] as const;
    const stale = { ...leases[1], fence: leases[1].fence + 1 };
    const completes = await Promise.all(
      [
        store.complete({ key: 'c-1', resource: 'c-1' }, leases[0], { payload: bytes('1') }),
        store.complete({ key: 'c-2', resource: 'c-2' }, stale, { payload: bytes('2') }),
        store.complete({ key: 'c-3', resource: 'c-3' }, leases[2], { payload: bytes('3') }),
      ].map(settled),
    );
    expect(completes[0]).toMatchObject({ value: { payload: bytes('1') } });
    expect(completes[1]).toMatchObject({ error: { code: 'FENCE_STALE' } });
    expect(completes[2]).toMatchObject({ value: { payload: bytes('3') } });
    expect(await store.inspect('c-2')).toMatchObject({ state: 'applying' });
  });

  it('a key whose resource row another transaction holds waits for it alone: the others are answered meanwhile', async () => {
    const patient = new PgStore({ pool: h.db.pool, schema: h.db.schema, lockWaitMs: 60_000 });
    await granted({ key: 'blocker', resource: 'held-row' });
    const lease = await granted({ key: 'waits', resource: 'held-row-2' });
    const other = await granted({ key: 'quick', resource: 'free-row' });
    const client = await side.connect();
    const pending = new Set<string>(['late', 'waits']);
    const noting = <T>(name: string, promise: Promise<T>) =>
      settled(promise).finally(() => pending.delete(name));
    let late: ReturnType<typeof settled<Acquisition>>;
    let waits: ReturnType<typeof settled<unknown>>;
    try {
      await client.query('begin');
      await client.query(
        `select from resources where resource in ('held-row', 'held-row-2') for update`,
      );
      late = noting('late', patient.acquire({ key: 'late', resource: 'held-row' }, TTL));
      const fast = settled(patient.acquire({ key: 'fast', resource: 'fast-row' }, TTL));
      waits = noting(
        'waits',
        patient.complete({ key: 'waits', resource: 'held-row-2' }, lease, { payload: bytes('w') }),
      );
      const quick = settled(
        patient.complete({ key: 'quick', resource: 'free-row' }, other, { payload: bytes('q') }),
      );
      expect(await fast).toMatchObject({ value: { outcome: 'granted' } });
      expect(await quick).toMatchObject({ value: { payload: bytes('q') } });
      expect(await store.inspect('quick')).toMatchObject({ state: 'done' });
      // Answered and committed while the row is held and its own callers still wait.
      expect([...pending].sort()).toEqual(['late', 'waits']);
    } finally {
      await client.query('rollback');
      client.release();
    }
    expect(await late).toMatchObject({ value: { outcome: 'contended' } });
    expect(await waits).toMatchObject({ value: { payload: bytes('w') } });
  });
});

describe('order and faults', () => {
  it('judges the keys of one statement in the order of their resources, whatever their arrival order', async () => {
    await h.db.pool.query(`
      create table resource_log (seq bigint generated always as identity, resource text);
      create function test_log_resource() returns trigger language plpgsql as $$
      begin
        insert into resource_log (resource) values (new.resource);
        return new;
      end $$;
      create trigger test_log_resource after insert on resources
        for each row execute function test_log_resource();
    `);
    try {
      // New resources: each key is judged by acquire(), which takes its resource's row.
      const arrival = ['order-m', 'order-z', 'order-a', 'order-q'];
      const { statements, value } = await counted(() =>
        Promise.all(arrival.map((resource) => store.acquire({ key: resource, resource }, TTL))),
      );
      expect(statements).toBe(1);
      expect(value.map((v) => v.outcome)).toEqual(Array(4).fill('granted'));
      const { rows } = await h.db.pool.query('select resource from resource_log order by seq');
      expect(rows.map((r) => r.resource)).toEqual([...arrival].sort());
    } finally {
      await h.db.pool.query('drop trigger test_log_resource on resources');
    }
  });

  it('two processes whose statements take the same resources in opposite arrival orders: every call answered, none failed', async () => {
    const pools = [0, 1].map(() => {
      const pool = new pg.Pool({ ...h.db.config, max: 16 });
      pool.on('error', () => {});
      return pool;
    });
    const stores = pools.map((pool) => new PgStore({ pool, schema: h.db.schema }));
    const resources = Array.from({ length: 8 }, (_, i) => `cross-${i}`);
    const outcomes = new Map<string, number>();
    const failures: unknown[] = [];
    // A count of calls per caller, not a span of time: a loaded machine runs them slower, not fewer.
    const callsPerCaller = 20;
    try {
      await Promise.all(
        stores.flatMap((s, p) => {
          const runner = new Runner(s, { ttlMs: TTL });
          return Array.from({ length: 16 }, async (_, caller) => {
            for (let n = 0; n < callsPerCaller; n++) {
              const index = (caller + n) % resources.length;
              const resource = resources[p === 0 ? index : resources.length - 1 - index]!;
              const execution = await runner
                .execute({ key: `x-${p}-${caller}-${n}`, resource }, async () => ({
                  payload: bytes('x'),
                }))
                .catch((error: unknown) => {
                  failures.push(error);
                  return undefined;
                });
              if (execution) {
                outcomes.set(execution.outcome, (outcomes.get(execution.outcome) ?? 0) + 1);
              }
            }
          });
        }),
      );
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
    expect(failures).toEqual([]);
    expect([...outcomes.keys()].every((o) => o === 'applied' || o === 'contended')).toBe(true);
    expect(outcomes.get('applied')).toBeGreaterThan(0);
    // Whatever was granted was completed: no resource left held.
    const { rows } = await h.db.pool.query(
      `select count(*)::int as held from resources where resource like 'cross-%' and holder is not null`,
    );
    expect(rows[0].held).toBe(0);
  });

  it.each(['acquire', 'complete'] as const)(
    'a backend killed in the middle of a statement of %ss: each key is asked alone, once; only the key whose own statement is killed too fails (issue 39)',
    async (kind) => {
      const keys = [`slow-${kind}`, `kill-a-${kind}`, `kill-b-${kind}`];
      const leases =
        kind === 'complete'
          ? await Promise.all(keys.map((key) => granted({ key, resource: key })))
          : [];
      const fences = await Promise.all(keys.map(fenceOf));
      const calls = keys.map((key, i) =>
        settled<unknown>(
          kind === 'acquire'
            ? store.acquire({ key, resource: key }, TTL)
            : store.complete({ key, resource: key }, leases[i]!, { payload: bytes('done') }),
        ),
      );
      // The statement sleeps on its slow key, every key of it inside; then the slow key's own.
      const sleeping = async (shared: boolean): Promise<number> => {
        for (let i = 0; i < 1_000; i++) {
          const { rows } = await side.query(
            `select pid from pg_stat_activity
              where datname = current_database() and wait_event = 'PgSleep'
                and (query like '%' || $1 || '%') = $2`,
            [kind === 'acquire' ? 'acquire_batch' : 'holder_batch', shared],
          );
          if (rows[0]) return rows[0].pid;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        throw new Error('no statement sleeps');
      };
      await side.query('select pg_terminate_backend($1)', [await sleeping(true)]);
      await side.query('select pg_terminate_backend($1)', [await sleeping(false)]);
      const [slow, ...others] = await Promise.all(calls);
      expect(slow).toMatchObject({ error: expect.any(StoreUnavailableError) });
      for (const answer of others) {
        expect(answer).toMatchObject({
          value: kind === 'acquire' ? { outcome: 'granted' } : { payload: bytes('done') },
        });
      }
      expect(await Promise.all(keys.map(fenceOf))).toEqual(
        kind === 'acquire' ? [fences[0], fences[1]! + 1, fences[2]! + 1] : fences,
      );
      expect(await store.inspect(keys[0]!)).toEqual(
        kind === 'acquire' ? undefined : expect.objectContaining({ state: 'applying' }),
      );
      for (const key of keys.slice(1)) {
        expect(await store.inspect(key)).toMatchObject({
          state: kind === 'acquire' ? 'held' : 'done',
        });
      }
      // The store goes on, on new connections.
      const after = await store.acquire({ key: `after-${kind}`, resource: `after-${kind}` }, TTL);
      expect(after.outcome).toBe('granted');
    },
  );

  it("a role's statement_timeout: 63 keys of busy resources and a free one in shared statements, the free key granted, the busy ones contended, none failed (issue 39)", async () => {
    const busy = Array.from({ length: 63 }, (_, i) => `timed-busy-${i}`);
    for (const resource of busy) {
      const lease = await granted({ key: `timed-used-${resource}`, resource });
      await store.release({ key: `timed-used-${resource}`, resource }, lease);
    }
    // Shorter than the shared statement's 63 waits of 50 ms (3.15 s), longer than one wait on a
    // loaded machine (100 ms cut a lone 50 ms wait there).
    const pool = new pg.Pool({
      ...h.db.config,
      options: `${h.db.config.options} -c statement_timeout=1000`,
    });
    pool.on('error', () => {});
    const timed = new PgStore({ pool, schema: h.db.schema, lockWaitMs: 50 });
    const holder = await side.connect();
    try {
      await holder.query('begin');
      await holder.query('select from resources where resource = any($1::text[]) for update', [
        busy,
      ]);
      const calls = [
        ...busy.map((resource) => ({ key: `timed-${resource}`, resource })),
        { key: 'timed-free', resource: 'timed-free' },
      ].map((a) => settled(timed.acquire(a, TTL)));
      const answers = await Promise.all(calls);
      const counts = new Map<string, number>();
      for (const answer of answers) {
        const what = 'value' in answer ? answer.value.outcome : String(answer.error);
        counts.set(what, (counts.get(what) ?? 0) + 1);
      }
      expect(Object.fromEntries(counts)).toEqual({ contended: 63, granted: 1 });
      expect(answers.at(-1)).toMatchObject({ value: { outcome: 'granted' } });
    } finally {
      await holder.query('rollback');
      holder.release();
      await pool.end();
    }
  });
});
