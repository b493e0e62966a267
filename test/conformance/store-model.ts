import type { KeyState, RetrySafety } from '../../src/core/index.js';

/**
 * A deliberately small restatement of the key state machine in docs/architecture.md,
 * written without looking at any store: the property test checks each store
 * against it step by step. Times are the store's clock in ms.
 */
export interface ModelKey {
  resource: string;
  safety: RetrySafety;
  state: KeyState;
  fence: number;
  result?: string;
}

interface ModelResource {
  fence: number;
  holder?: { key: string; expiresAt: number };
}

export type ModelAnswer =
  | { kind: 'applied'; fence: number }
  | { kind: 'replayed'; result: string }
  | { kind: 'contended' }
  | { kind: 'uncertain' }
  | { kind: 'ok' }
  | { kind: 'error'; code: string };

export class StoreModel {
  readonly keys = new Map<string, ModelKey>();
  readonly resources = new Map<string, ModelResource>();
  now = 0;

  constructor(bindings: Array<{ key: string; resource: string; safety: RetrySafety }>) {
    for (const b of bindings) {
      this.keys.set(b.key, { resource: b.resource, safety: b.safety, state: 'free', fence: 0 });
      this.resources.set(b.resource, { fence: 0 });
    }
  }

  acquire(key: string, ttl: number, applying: boolean): ModelAnswer {
    const k = this.#key(key);
    const r = this.#resource(k.resource);
    if (k.state === 'done') return { kind: 'replayed', result: k.result! };
    if (k.state === 'uncertain') return { kind: 'uncertain' };
    const live = r.holder !== undefined && r.holder.expiresAt > this.now;
    if (k.state === 'applying' && !live && k.safety !== 'safe') {
      k.state = 'uncertain';
      r.holder = undefined;
      return { kind: 'uncertain' };
    }
    if (live) return { kind: 'contended' };
    if (r.holder && r.holder.key !== key) this.#conclude(r.holder.key);
    r.fence += 1;
    r.holder = { key, expiresAt: this.now + ttl };
    k.fence = r.fence;
    k.state = applying ? 'applying' : 'held';
    return { kind: 'applied', fence: r.fence };
  }

  holds(key: string, fence: number): boolean {
    const k = this.#key(key);
    const r = this.#resource(k.resource);
    return (
      r.fence === fence &&
      k.fence === fence &&
      r.holder?.key === key &&
      (k.state === 'held' || k.state === 'applying')
    );
  }

  renew(key: string, fence: number, ttl: number, applying: boolean): ModelAnswer {
    if (!this.holds(key, fence)) return { kind: 'error', code: 'FENCE_STALE' };
    const k = this.#key(key);
    this.#resource(k.resource).holder = { key, expiresAt: this.now + ttl };
    if (applying) k.state = 'applying';
    return { kind: 'ok' };
  }

  complete(key: string, fence: number, result: string): ModelAnswer {
    const k = this.#key(key);
    if (k.state === 'done' && k.fence === fence) return { kind: 'replayed', result: k.result! };
    if (!this.holds(key, fence)) return { kind: 'error', code: 'FENCE_STALE' };
    this.#resource(k.resource).holder = undefined;
    k.state = 'done';
    k.result = result;
    return { kind: 'replayed', result };
  }

  markUncertain(key: string, fence: number): ModelAnswer {
    const k = this.#key(key);
    if (k.state === 'uncertain' && k.fence === fence) return { kind: 'ok' };
    if (!this.holds(key, fence)) return { kind: 'error', code: 'FENCE_STALE' };
    this.#resource(k.resource).holder = undefined;
    k.state = 'uncertain';
    return { kind: 'ok' };
  }

  release(key: string, fence: number): ModelAnswer {
    const k = this.#key(key);
    const r = this.#resource(k.resource);
    if (r.fence === fence && r.holder?.key !== key) return { kind: 'ok' };
    if (!this.holds(key, fence)) return { kind: 'error', code: 'FENCE_STALE' };
    r.holder = undefined;
    k.state = 'free';
    return { kind: 'ok' };
  }

  resolve(key: string, applied: boolean, result: string): ModelAnswer {
    const k = this.#key(key);
    if (k.state === 'done') return { kind: 'replayed', result: k.result! };
    if (k.state !== 'uncertain') return { kind: 'error', code: 'NOT_UNCERTAIN' };
    k.state = applied ? 'done' : 'free';
    if (applied) k.result = result;
    return applied ? { kind: 'replayed', result } : { kind: 'ok' };
  }

  sweep(): void {
    for (const r of this.resources.values()) {
      if (r.holder && r.holder.expiresAt <= this.now) {
        this.#conclude(r.holder.key);
        r.holder = undefined;
      }
    }
  }

  #conclude(key: string): void {
    const k = this.#key(key);
    if (k.state === 'applying') k.state = k.safety === 'safe' ? 'free' : 'uncertain';
    else if (k.state === 'held') k.state = 'free';
  }

  #key(key: string): ModelKey {
    const k = this.keys.get(key);
    if (!k) throw new Error(`model has no key ${key}`);
    return k;
  }

  #resource(name: string): ModelResource {
    const r = this.resources.get(name);
    if (!r) throw new Error(`model has no resource ${name}`);
    return r;
  }
}
