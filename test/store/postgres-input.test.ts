/**
 * Bad input against PgStore and PgFencedSink: each attempt gets a typed error (InvalidActionError,
 * code INVALID_ACTION) before anything is sent, and the tables are checked to be unchanged.
 * Limits are configured small here (keys 32 bytes, resources 16, payloads 64, leases 1 minute) to prove that
 * `limits` is honoured; SQL metacharacters and non-ASCII are ordinary text and round-trip.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Action, InvalidActionError } from '../../src/core/index.js';
import type { PgStore } from '../../src/store/postgres/index.js';
import { bytes, text } from '../support/bytes.js';
import { type PgHarness, pgHarness } from './pg-support/harness.js';

const LIMITS = {
  maxKeyBytes: 32,
  maxResourceBytes: 16,
  maxPayloadBytes: 64,
  maxReasonBytes: 40,
  maxTtlMs: 60_000,
};
const TTL = 10_000;
const ok: Action = { key: 'input-ok', resource: 'res-ok' };
const lease = { resource: 'res-ok', fence: 1, ttlMs: TTL, expiresAt: 0 };

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness('pg_input', { limits: LIMITS, movableClock: false });
});
afterAll(() => h?.close());

async function tableCounts(): Promise<Record<string, number>> {
  const { rows } = await h.db.pool.query(`select
    (select count(*) from keys)::int as keys,
    (select count(*) from resources)::int as resources,
    (select count(*) from events)::int as events,
    (select count(*) from sink_fences)::int as sink_fences`);
  return rows[0];
}

// [what was tried, the call that tries it]: each must throw InvalidActionError and write nothing.
const attempts: Array<[string, (store: PgStore) => Promise<unknown>]> = [
  ['acquire: empty key', (s) => s.acquire({ ...ok, key: '' }, TTL)],
  ['acquire: empty resource', (s) => s.acquire({ ...ok, resource: '' }, TTL)],
  [
    'acquire: key over maxKeyBytes (33 ASCII)',
    (s) => s.acquire({ ...ok, key: 'k'.repeat(33) }, TTL),
  ],
  [
    'acquire: key over maxKeyBytes (11 x 3-byte CJK)',
    (s) => s.acquire({ ...ok, key: '鍵'.repeat(11) }, TTL),
  ],
  [
    'acquire: resource over maxResourceBytes',
    (s) => s.acquire({ ...ok, resource: 'r'.repeat(17) }, TTL),
  ],
  ['acquire: NUL in key', (s) => s.acquire({ ...ok, key: 'a\0b' }, TTL)],
  ['acquire: NUL in resource', (s) => s.acquire({ ...ok, resource: 'a\0b' }, TTL)],
  ['acquire: lone surrogate in key', (s) => s.acquire({ ...ok, key: 'a\uDC00' }, TTL)],
  ['acquire: key not a string', (s) => s.acquire({ ...ok, key: 42 as never }, TTL)],
  [
    'acquire: payload over maxPayloadBytes',
    (s) => s.acquire({ ...ok, payload: new Uint8Array(65) }, TTL),
  ],
  ['acquire: payload not bytes', (s) => s.acquire({ ...ok, payload: 'x' as never }, TTL)],
  ['acquire: unknown retrySafety', (s) => s.acquire({ ...ok, retrySafety: 'maybe' as never }, TTL)],
  ['acquire: ttl 0', (s) => s.acquire(ok, 0)],
  ['acquire: ttl -1', (s) => s.acquire(ok, -1)],
  ['acquire: ttl NaN', (s) => s.acquire(ok, Number.NaN)],
  ['acquire: ttl Infinity', (s) => s.acquire(ok, Number.POSITIVE_INFINITY)],
  ['acquire: ttl 1.5', (s) => s.acquire(ok, 1.5)],
  ['acquire: ttl over maxTtlMs', (s) => s.acquire(ok, 60_001)],
  ['acquire: ttl 2^53-1', (s) => s.acquire(ok, Number.MAX_SAFE_INTEGER)],
  ['renew: ttl 0', (s) => s.renew(ok, lease, 0)],
  ['renew: ttl over maxTtlMs', (s) => s.renew(ok, lease, 60_001)],
  ['renew: lease without a fence', (s) => s.renew(ok, { ...lease, fence: Number.NaN }, TTL)],
  [
    'complete: result over maxPayloadBytes',
    (s) => s.complete(ok, lease, { payload: new Uint8Array(65) }),
  ],
  ['complete: no result', (s) => s.complete(ok, lease, undefined as never)],
  ['markUncertain: empty reason', (s) => s.markUncertain(ok, lease, '')],
  ['markUncertain: reason over maxReasonBytes', (s) => s.markUncertain(ok, lease, 'x'.repeat(41))],
  ['markUncertain: NUL in reason', (s) => s.markUncertain(ok, lease, 'a\0b')],
  ['release: empty key', (s) => s.release({ ...ok, key: '' }, lease)],
  [
    'resolveUncertain: empty reason',
    (s) => s.resolveUncertain('input-ok', { applied: false, reason: '' }),
  ],
  [
    'resolveUncertain: applied not boolean',
    (s) => s.resolveUncertain('input-ok', { applied: 'yes' as never, reason: 'r' }),
  ],
  [
    'resolveUncertain: result over maxPayloadBytes',
    (s) =>
      s.resolveUncertain('input-ok', {
        applied: true,
        result: { payload: new Uint8Array(65) },
        reason: 'r',
      }),
  ],
  [
    'resolveUncertain: fence 0',
    (s) => s.resolveUncertain('input-ok', { applied: false, reason: 'r', fence: 0 }),
  ],
  [
    'resolveUncertain: fence not an integer',
    (s) => s.resolveUncertain('input-ok', { applied: false, reason: 'r', fence: '2' as never }),
  ],
  [
    'resolveUncertain: NUL in key',
    (s) => s.resolveUncertain('a\0b', { applied: false, reason: 'r' }),
  ],
  ['purge: olderThanMs 0', (s) => s.purge({ olderThanMs: 0 })],
  ['purge: olderThanMs NaN', (s) => s.purge({ olderThanMs: Number.NaN })],
  ['list: negative limit', (s) => s.list({ limit: -1 })],
  ['writeFenced: empty resource', () => h.sink.writeFenced('', 1, async () => 'x')],
  ['writeFenced: NUL in resource', () => h.sink.writeFenced('a\0b', 1, async () => 'x')],
  ['writeFenced: fence 0', () => h.sink.writeFenced('r', 0, async () => 'x')],
  ['writeFenced: fence 1.5', () => h.sink.writeFenced('r', 1.5, async () => 'x')],
];

describe('bad input is refused with a typed error and nothing is written', () => {
  it.each(attempts)('%s', async (_what, call) => {
    const before = await tableCounts();
    const error = await call(h.store).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidActionError);
    expect(error).toMatchObject({ code: 'INVALID_ACTION' });
    expect(await tableCounts()).toEqual(before);
  });

  it('keys the store could never hold read as never seen', async () => {
    expect(await h.store.inspect('a\0b')).toBeUndefined();
    expect(await h.store.events('k'.repeat(33))).toEqual([]);
  });

  it('SQL metacharacters and non-ASCII are ordinary text, byte for byte', async () => {
    const a: Action = {
      key: `'); drop table keys;--鍵🔑`,
      resource: `r' or '1'='1ü`,
      payload: bytes('\\x00 $1 %s'),
    };
    const acq = await h.store.acquire(a, TTL, { applying: true });
    if (acq.outcome !== 'applied') throw new Error(acq.outcome);
    await h.store.complete(a, acq.lease, { payload: bytes('ok ✓') });
    expect((await h.store.inspect(a.key))?.resource).toBe(a.resource);
    const replay = await h.store.acquire(a, TTL);
    expect(replay.outcome === 'replayed' && text(replay.result.payload)).toBe('ok ✓');
    expect((await h.store.list({ state: 'done' })).map((r) => r.key)).toContain(a.key);
  });

  it('a payload exactly at the limit is accepted', async () => {
    const a: Action = { key: 'at-limit', resource: 'at-limit', payload: new Uint8Array(64) };
    expect((await h.store.acquire(a, TTL)).outcome).toBe('applied');
  });
});
