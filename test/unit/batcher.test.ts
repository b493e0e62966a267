/**
 * The Batcher's grouping (src/store/postgres/batcher.ts), with kinds that record what they were
 * sent: a call alone takes the one-key path, calls of one turn and calls that arrive while a
 * statement is in flight share one, within the limits, and each gets its own answer or error.
 */
import { describe, expect, it } from 'vitest';
import { AGAIN, Batcher, type BatchKind, BatchTraffic } from '../../src/store/postgres/batcher.js';

interface Call {
  key: string;
  bytes?: number;
  resource?: string;
}

/** A kind whose statements wait until released, recording each one. */
function recordingKind(answer: (call: Call) => string | typeof AGAIN = (c) => `ok ${c.key}`) {
  const sent: { path: 'one' | 'many'; keys: string[] }[] = [];
  const pending: (() => void)[] = [];
  let failWith: unknown;
  const failAlone = new Map<string, unknown>();
  const statement = <T>(value: () => T, alone?: string): Promise<T> =>
    new Promise((resolve, reject) => {
      pending.push(() => {
        const failure = alone === undefined ? undefined : failAlone.get(alone);
        if (failWith !== undefined) reject(failWith);
        else if (failure !== undefined) reject(failure);
        else resolve(value());
      });
    });
  const kind: BatchKind<Call, string> = {
    one: (call) => {
      sent.push({ path: 'one', keys: [call.key] });
      return statement(() => `alone ${call.key}`, call.key);
    },
    many: (calls) => {
      sent.push({ path: 'many', keys: calls.map((c) => c.key) });
      return statement(() => calls.map(answer));
    },
    name: (call) => ({ name: call.key, with: call.resource ?? '' }),
    bytes: (call) => call.bytes ?? 0,
  };
  return {
    kind,
    sent,
    /** Lets every statement sent so far return, then waits for what that sets off. */
    async returnAll(): Promise<void> {
      for (const release of pending.splice(0)) release();
      await turn();
    },
    /** Every statement returned from now on fails with `error` (undefined: none). */
    fail(error: unknown) {
      failWith = error;
    },
    /** The one-key statement of `key` fails with `error`. */
    failAlone(key: string, error: unknown) {
      failAlone.set(key, error);
    },
  };
}

/**
 * A few event-loop turns: whatever the Batcher sends at the end of the turn in which a statement
 * returned (after that statement's promise chain has run) has been sent.
 */
async function turn(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
}

const limits = { maxKeys: 32, maxBytes: 1_000 };

describe('Batcher', () => {
  it('sends a call alone through the one-key path', async () => {
    const k = recordingKind();
    const batcher = new Batcher(k.kind, limits);
    const answer = batcher.run({ key: 'a' });
    await turn();
    await k.returnAll();
    expect(await answer).toBe('alone a');
    expect(k.sent).toEqual([{ path: 'one', keys: ['a'] }]);
  });

  it('sends the calls of one turn together, in arrival order', async () => {
    const k = recordingKind();
    const batcher = new Batcher(k.kind, limits);
    const answers = ['a', 'b', 'c'].map((key) => batcher.run({ key }));
    await turn();
    await k.returnAll();
    expect(await Promise.all(answers)).toEqual(['ok a', 'ok b', 'ok c']);
    expect(k.sent).toEqual([{ path: 'many', keys: ['a', 'b', 'c'] }]);
  });

  it('sends a lone call before the end of its turn, with the calls its code made; with another call of the store in flight, at the end of the turn', async () => {
    const k = recordingKind();
    const other = recordingKind();
    const traffic = new BatchTraffic();
    const batcher = new Batcher(k.kind, limits, traffic);
    const otherBatcher = new Batcher(other.kind, limits, traffic);
    // The promise jobs of the code that made the lone call join it; the turn's I/O phase is not awaited.
    const lone = [
      batcher.run({ key: 'a' }),
      Promise.resolve().then(() => batcher.run({ key: 'b' })),
    ];
    await new Promise<void>((resolve) => process.nextTick(resolve));
    await Promise.resolve();
    expect(k.sent).toEqual([{ path: 'many', keys: ['a', 'b'] }]);
    await k.returnAll();
    expect(await Promise.all(lone)).toEqual(['ok a', 'ok b']);
    expect(traffic.calls).toBe(0);
    // Another kind's call is in flight: its return may resume callers of this kind, so this one
    // waits for the end of the turn.
    const held = otherBatcher.run({ key: 'x' });
    await turn();
    const later = batcher.run({ key: 'c' });
    await new Promise<void>((resolve) => process.nextTick(resolve));
    expect(k.sent).toHaveLength(1);
    await turn();
    expect(k.sent.at(-1)).toEqual({ path: 'one', keys: ['c'] });
    await other.returnAll();
    await k.returnAll();
    expect([await held, await later]).toEqual(['alone x', 'alone c']);
    expect(traffic.calls).toBe(0);
  });

  it('holds the calls that arrive while a statement is in flight, and sends them together when it returns', async () => {
    const k = recordingKind();
    const batcher = new Batcher(k.kind, limits);
    const first = batcher.run({ key: 'a' });
    await turn();
    const later = [batcher.run({ key: 'b' })];
    await turn();
    later.push(batcher.run({ key: 'c' }));
    await turn();
    expect(k.sent).toEqual([{ path: 'one', keys: ['a'] }]);
    await k.returnAll();
    expect(k.sent.at(-1)).toEqual({ path: 'many', keys: ['b', 'c'] });
    await k.returnAll();
    expect([await first, ...(await Promise.all(later))]).toEqual(['alone a', 'ok b', 'ok c']);
  });

  it('puts at most maxKeys calls in one statement, and the rest in the next', async () => {
    const k = recordingKind();
    const batcher = new Batcher(k.kind, { ...limits, maxKeys: 2 });
    const answers = ['a', 'b', 'c'].map((key) => batcher.run({ key }));
    await turn();
    await k.returnAll();
    await k.returnAll();
    expect(await Promise.all(answers)).toEqual(['ok a', 'ok b', 'alone c']);
    expect(k.sent).toEqual([
      { path: 'many', keys: ['a', 'b'] },
      { path: 'one', keys: ['c'] },
    ]);
  });

  it('puts two calls of one name in one statement only when they agree: the other waits for the next', async () => {
    const k = recordingKind();
    const batcher = new Batcher(k.kind, limits);
    const answers = [
      batcher.run({ key: 'a', resource: 'r' }),
      batcher.run({ key: 'a', resource: 's' }),
      batcher.run({ key: 'a', resource: 'r' }),
      batcher.run({ key: 'b', resource: 's' }),
    ];
    await turn();
    await k.returnAll();
    await k.returnAll();
    expect(await Promise.all(answers)).toEqual(['ok a', 'alone a', 'ok a', 'ok b']);
    expect(k.sent).toEqual([
      { path: 'many', keys: ['a', 'a', 'b'] },
      { path: 'one', keys: ['a'] },
    ]);
  });

  it('keeps a statement within maxBytes, though a larger call still goes, alone', async () => {
    const k = recordingKind();
    const batcher = new Batcher(k.kind, { ...limits, maxBytes: 100 });
    const answers = [
      batcher.run({ key: 'big', bytes: 500 }),
      batcher.run({ key: 'a', bytes: 60 }),
      batcher.run({ key: 'b', bytes: 60 }),
    ];
    await turn();
    await k.returnAll();
    await k.returnAll();
    await k.returnAll();
    expect(await Promise.all(answers)).toEqual(['alone big', 'alone a', 'alone b']);
    expect(k.sent.map((s) => s.keys)).toEqual([['big'], ['a'], ['b']]);
  });

  it('asks a call the shared statement answered AGAIN alone, and answers the others at once', async () => {
    const k = recordingKind((c) => (c.key === 'b' ? AGAIN : `ok ${c.key}`));
    const batcher = new Batcher(k.kind, limits);
    const answers = ['a', 'b', 'c'].map((key) => batcher.run({ key }));
    await turn();
    await k.returnAll();
    expect(await answers[0]).toBe('ok a');
    expect(await answers[2]).toBe('ok c');
    expect(k.sent.at(-1)).toEqual({ path: 'one', keys: ['b'] });
    await k.returnAll();
    expect(await answers[1]).toBe('alone b');
  });

  it('asks each call of a shared statement that failed as a whole alone, once: only a call whose own statement fails gets a failure', async () => {
    const k = recordingKind();
    const batcher = new Batcher(k.kind, limits);
    const answers = ['a', 'b', 'c'].map((key) =>
      batcher.run({ key }).catch((error: unknown) => error),
    );
    await turn();
    k.fail(new Error('canceling statement due to statement timeout'));
    await k.returnAll();
    expect(k.sent).toEqual([
      { path: 'many', keys: ['a', 'b', 'c'] },
      { path: 'one', keys: ['a'] },
      { path: 'one', keys: ['b'] },
      { path: 'one', keys: ['c'] },
    ]);
    k.fail(undefined);
    const lost = new Error('connection terminated');
    k.failAlone('b', lost);
    await k.returnAll();
    expect(await Promise.all(answers)).toEqual(['alone a', lost, 'alone c']);
    // Each once: nothing more was sent, and the next call is sent as ever.
    expect(k.sent).toHaveLength(4);
    const next = batcher.run({ key: 'd' });
    await turn();
    expect(k.sent.at(-1)).toEqual({ path: 'one', keys: ['d'] });
    await k.returnAll();
    expect(await next).toBe('alone d');
  });

  it("fails a call alone in a shared statement (everyCall) with that statement's error", async () => {
    const k = recordingKind();
    const batcher = new Batcher(k.kind, { ...limits, everyCall: true });
    const answer = batcher.run({ key: 'a' }).catch((error: unknown) => error);
    await turn();
    const lost = new Error('connection terminated');
    k.fail(lost);
    await k.returnAll();
    expect(await answer).toBe(lost);
    expect(k.sent).toEqual([{ path: 'many', keys: ['a'] }]);
  });

  it('sends even a call alone through the shared statement with everyCall', async () => {
    const k = recordingKind();
    const batcher = new Batcher(k.kind, { ...limits, everyCall: true });
    const answer = batcher.run({ key: 'a' });
    await turn();
    await k.returnAll();
    expect(await answer).toBe('ok a');
    expect(k.sent).toEqual([{ path: 'many', keys: ['a'] }]);
  });
});
