/**
 * Node-side helpers for testing your own workflows that call guarded effects (`sideeffect/testing`),
 * with Temporal's TestWorkflowEnvironment or any server you point a worker at:
 *
 * - {@link TestStore}: an in-memory store that also says what it holds and can hold a resource,
 *   so a test sees `contended` without a second worker;
 * - {@link scriptEffect}: an effect whose attempts follow a script (applied with a result,
 *   uncertain, not applied, a definite failure) instead of your real `apply`;
 * - {@link testPlugin}: the worker plugin with test defaults (no sweeper, no search attributes);
 * - {@link waitForReconcile} and {@link resolve}: find a key's ReconcileWorkflow and send it a
 *   verdict, as the person on call would.
 *
 * Not workflow-safe: import it from test files and workers, never from workflow code.
 */
import type { Client } from '@temporalio/client';
import type { AnyEffect, SideEffectDefinition } from '../activities/effect.js';
import { NotAppliedError } from '../core/errors.js';
import { decodeJson } from '../core/json.js';
import type { Store } from '../core/store.js';
import type { KeyState, RetrySafety } from '../core/types.js';
import {
  type ReconcileResolution,
  type ReconcileStatus,
  type ResolveInput,
  reconcileWorkflowId,
  resolveUpdate,
  statusQuery,
} from '../protocol/wire.js';
import { MemoryStore } from '../store/memory.js';
import { SideEffectPlugin, type SideEffectPluginOptions } from '../worker/plugin.js';

/**
 * One attempt of a scripted effect:
 * - `{ applied: result }`: the downstream took it; the call returns `result`;
 * - `'uncertain'`: the attempt fails after it may have written (a lost response), so the key
 *   becomes uncertain and a ReconcileWorkflow waits for a verdict;
 * - `'not applied'`: the downstream definitely refused; the key is freed and the call fails with
 *   `SideEffectNotApplied`;
 * - `{ definiteFailure: type }`: the same, with your failure type (e.g. `CardDeclined`), as a
 *   NotAppliedError with that type fails it.
 */
export type ScriptedAttempt<R> =
  | { applied: R }
  | 'uncertain'
  | 'not applied'
  | { definiteFailure: string; message?: string; details?: unknown[] };

/** An effect definition whose attempts follow a script, with what each attempt was given. */
export interface ScriptedEffect<I, R> extends SideEffectDefinition<I, R> {
  /** Every attempt's input and key, in order: how many times the "downstream" was reached. */
  readonly calls: ReadonlyArray<{ input: I; key: string; fence: number }>;
}

/** Where a scripted effect's lease goes and how it retries, when not taken from your real effect. */
export interface ScriptEffectOptions<I> {
  /**
   * The real effect this one stands in for: its `resource`, `retrySafety`, `definiteFailures`,
   * `inFlight`, `probe` and `result` check are kept, only `apply` is scripted (without the check,
   * a test would accept a verdict the real worker refuses).
   * @default none: `resource` below, retry safety `unknown`, no probe
   */
  like?: SideEffectDefinition<I, unknown, unknown>;
  /**
   * The resource the lease is taken on.
   * @default `like.resource`, else `'scripted'` for every input
   */
  resource?: (input: I) => string;
}

/**
 * An effect that plays `script`, one entry per attempt (the last repeats), in place of your real
 * `apply`: the only way to make an attempt uncertain or refused on purpose without a flaky
 * downstream, and a mock registered under your effect's name, not beside it (the activity's wire
 * shape is the library's, so a plain activity mock cannot stand in for it).
 *
 * @example
 * ```ts
 * const charge = scriptEffect<ChargeInput, Receipt>(['uncertain'], { like: effects.charge });
 * ```
 */
export function scriptEffect<I, R>(
  script: readonly ScriptedAttempt<R>[],
  options: ScriptEffectOptions<I> = {},
): ScriptedEffect<I, R> {
  if (script.length === 0) throw new TypeError('scriptEffect needs at least one attempt');
  const calls: Array<{ input: I; key: string; fence: number }> = [];
  const { like } = options;
  const resource = options.resource ?? like?.resource ?? (() => 'scripted');
  return {
    ...(like?.retrySafety === undefined ? {} : { retrySafety: like.retrySafety }),
    ...(like?.definiteFailures === undefined ? {} : { definiteFailures: like.definiteFailures }),
    ...(like?.inFlight === undefined ? {} : { inFlight: like.inFlight }),
    ...(like?.result === undefined ? {} : { result: like.result }),
    ...(like?.probe === undefined
      ? {}
      : { probe: like.probe as SideEffectDefinition<I, R>['probe'] }),
    calls,
    resource,
    async apply(input, { key, lease }) {
      const attempt = script[Math.min(calls.length, script.length - 1)]!;
      calls.push({ input, key, fence: lease.fence });
      if (attempt === 'uncertain')
        throw new Error('scripted: the response was lost after the downstream may have written');
      if (attempt === 'not applied') throw new NotAppliedError('scripted: the downstream refused');
      if ('definiteFailure' in attempt)
        throw new NotAppliedError(attempt.message ?? `scripted: ${attempt.definiteFailure}`, {
          type: attempt.definiteFailure,
          ...(attempt.details === undefined ? {} : { details: attempt.details }),
        });
      return attempt.applied;
    },
  };
}

/** What a test store holds for one key, with the result decoded from its JSON. */
export interface StoredKey {
  key: string;
  resource: string;
  state: KeyState;
  fence: number;
  retrySafety: RetrySafety;
  /** The recorded result (JSON-decoded), for a done key. */
  result?: unknown;
  reason?: string;
}

/**
 * A MemoryStore for tests: the same gate the workers run, plus what a test asserts on (the keys
 * and their decoded results) and a way to hold a resource so the next call sees `contended`.
 */
export class TestStore extends MemoryStore {
  /** Every key the store holds, in key order, results decoded. */
  async keys(): Promise<StoredKey[]> {
    const records = await this.list();
    return records
      .map(
        ({ key, resource, state, fence, retrySafety, result, reason }): StoredKey => ({
          key,
          resource,
          state,
          fence,
          retrySafety,
          ...(result === undefined ? {} : { result: decodeJson(result) }),
          ...(reason === undefined ? {} : { reason }),
        }),
      )
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  /** One key as {@link keys} shows it, or undefined if the store never saw it. */
  async key(key: string): Promise<StoredKey | undefined> {
    return (await this.keys()).find((held) => held.key === key);
  }

  /**
   * Takes `resource`'s lease for `forMs` under a key of its own, as another worker mid-apply
   * would: calls on that resource get `contended`, and Temporal retries them when the hold's
   * time is up (the retry delay is the lease's time left, so releasing early with the returned
   * function helps only calls that have not tried yet).
   */
  async holdResource(resource: string, forMs: number): Promise<() => Promise<void>> {
    const action = { key: `sideeffect-testing/hold/${resource}/${Date.now()}`, resource };
    const acquired = await this.acquire(action, forMs);
    if (acquired.outcome !== 'granted')
      throw new Error(`resource ${resource} is already held (${acquired.outcome})`);
    const { lease } = acquired;
    return () => this.release(action, lease);
  }
}

/** {@link testPlugin}'s options: the plugin's, with test defaults. */
export interface TestPluginOptions
  extends Omit<Partial<SideEffectPluginOptions>, 'store' | 'ttlMs' | 'effects'> {
  effects: Record<string, AnyEffect>;
  /**
   * The store the effects are judged by; keep a reference to assert on it.
   * @default a new TestStore
   */
  store?: Store;
  /**
   * The lease TTL: short, so a test that kills or holds a lease waits seconds, not minutes.
   * @default 5_000
   */
  ttlMs?: number;
}

/**
 * {@link SideEffectPlugin} with what a test wants: a fresh {@link TestStore}, a 5 s lease, no
 * sweeper (it would race the test for uncertain keys) and no search attributes (a test server
 * seldom has them registered).
 */
export function testPlugin(options: TestPluginOptions): SideEffectPlugin {
  return new SideEffectPlugin({
    store: new TestStore(),
    ttlMs: 5_000,
    sweepEveryMs: 0,
    searchAttributes: false,
    ...options,
  });
}

/** How long {@link waitForReconcile} polls. */
export interface WaitForReconcileOptions {
  /**
   * The state to wait for.
   * @default 'waiting' (a person's verdict is needed)
   */
  state?: ReconcileStatus['state'];
  /**
   * Gives up with an error after this long.
   * @default 30_000
   */
  timeoutMs?: number;
}

/**
 * Polls the status query of `key`'s ReconcileWorkflow until it is in `state`: the moment a test
 * (or an operator) can send a verdict. Keys are `<workflowId>/<step>` unless the call set `key`.
 */
export async function waitForReconcile(
  client: Client,
  key: string,
  options: WaitForReconcileOptions = {},
): Promise<ReconcileStatus> {
  const { state = 'waiting', timeoutMs = 30_000 } = options;
  const handle = client.workflow.getHandle(reconcileWorkflowId(key));
  const deadline = Date.now() + timeoutMs;
  let last: ReconcileStatus | undefined;
  for (;;) {
    // Not started yet, or not past its first task: the query fails; keep polling.
    last = await handle.query(statusQuery).catch(() => last);
    if (last?.state === state) return last;
    if (Date.now() > deadline)
      throw new Error(
        `the ReconcileWorkflow of ${key} was not ${state} within ${timeoutMs} ms (last: ${last?.state ?? 'not started'})`,
      );
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Sends `verdict` to `key`'s ReconcileWorkflow through the resolve Update and returns how it
 * ended, as `sideeffect resolve` does: the waiting workflow then gets the recorded result
 * (applied) or runs the effect again (not applied). A verdict that names no attempt is sent
 * for the attempt the run judges now (its `status` query's fence), as a test means it: the
 * workflow refuses a verdict naming none.
 */
export async function resolve(
  client: Client,
  key: string,
  verdict: ResolveInput,
): Promise<ReconcileResolution> {
  const handle = client.workflow.getHandle(reconcileWorkflowId(key));
  let named = verdict;
  if (verdict.fence === undefined && verdict.attempt === undefined) {
    const { fence } = await handle.query(statusQuery);
    named = fence === undefined ? { ...verdict, attempt: 'any' } : { ...verdict, fence };
  }
  return handle.executeUpdate(resolveUpdate, { args: [named] });
}
