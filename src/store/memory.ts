import {
  type BreakerAdmission,
  type BreakerAnswer,
  type BreakerCommand,
  BreakerMachine,
  type BreakerOutcome,
  type BreakerPolicy,
  type BreakerRecord,
  type BreakerStore,
  type BreakerTransition,
  checkBreakerAttempt,
  checkBreakerCommand,
  checkBreakerGroup,
  checkBreakerPolicy,
} from '../core/breaker.js';
import {
  FenceStaleError,
  KeyConflictError,
  MAX_PENDING_VERDICTS,
  NotUncertainError,
  PendingVerdictsFullError,
  StaleVerdictError,
} from '../core/errors.js';
import type { FencedSink, ListFilter, PendingVerdictStore, Store } from '../core/store.js';
import type {
  Acquisition,
  Action,
  Fence,
  Key,
  KeyEvent,
  KeyRecord,
  KeyState,
  Lease,
  Result,
  SweepReport,
  UncertainBacklog,
} from '../core/types.js';
import {
  checkAction,
  checkBytes,
  checkLeaseTtl,
  checkPendingPage,
  checkPurge,
  checkReason,
  checkResolution,
  checkText,
  checkWithdrawal,
  defaultLimits,
  type Limits,
} from '../core/validate.js';
import type {
  PendingVerdict,
  PendingVerdictOutcome,
  PendingVerdictPage,
  Resolution,
  ResolveOutcome,
  VerdictJudgement,
  Withdrawal,
} from '../core/verdict.js';
import { KeyedGate } from '../syncx/index.js';
import { payloadDigest } from './digest.js';

/** A key as the store keeps it: its public record plus the payload digest it is bound to. */
interface KeyRow extends KeyRecord {
  digest: Buffer;
}

interface ResourceRow {
  fence: Fence;
  holder?: { key: Key; expiresAt: number };
}

export interface MemoryStoreOptions {
  /**
   * The store's clock in epoch milliseconds; inject one to test lease expiry without waiting.
   * @default Date.now
   */
  now?: () => number;
  /**
   * Size limits, the same as PgStore's, so a test with MemoryStore refuses what production would.
   * @default defaultLimits
   */
  limits?: Partial<Limits>;
}

/**
 * The reference Store: the whole state machine in one process, each method
 * synchronous inside (so atomic) behind a promise. Use it in tests and
 * single-process tools; it guards nothing across processes.
 */
export class MemoryStore implements Store, PendingVerdictStore, BreakerStore {
  readonly #keys = new Map<Key, KeyRow>();
  readonly #resources = new Map<string, ResourceRow>();
  readonly #events: KeyEvent[] = [];
  /** Per uncertain key: the attempt (fence) a ReconcileWorkflow was started for, and when. */
  readonly #reconcileStarts = new Map<Key, { fence: Fence; at: number }>();
  /** Verdicts held for a worker's check, in the order they were held. */
  readonly #pending: PendingVerdict[] = [];
  #sweepLeader: object | undefined;
  readonly #breakers = new BreakerMachine();
  readonly #now: () => number;
  readonly #limits: Limits;

  constructor(options: MemoryStoreOptions = {}) {
    this.#now = options.now ?? Date.now;
    this.#limits = { ...defaultLimits, ...options.limits };
  }

  async acquire(
    action: Action,
    ttlMs: number,
    options: { applying?: boolean } = {},
  ): Promise<Acquisition> {
    const a = checkAction(action, this.#limits);
    checkLeaseTtl(ttlMs, this.#limits);
    const now = this.#now();
    const digest = payloadDigest(a.payload);
    const existing = this.#keys.get(a.key);
    if (existing) {
      if (existing.resource !== a.resource) throw new KeyConflictError(a.key, 'resource');
      if (!existing.digest.equals(digest)) throw new KeyConflictError(a.key, 'payload');
      if (existing.state === 'done') return { outcome: 'replayed', result: copy(existing.result!) };
      if (existing.state === 'uncertain')
        return { outcome: 'uncertain', reason: existing.reason ?? '' };
    }
    const resource = this.#resource(a.resource);
    const holder = resource.holder;
    const live = holder !== undefined && holder.expiresAt > now;
    // A dead attempt is judged by the declaration it was granted with, not by this caller's.
    if (existing?.state === 'applying' && !live && existing.retrySafety !== 'safe') {
      this.#transition(existing, 'uncertain', LEASE_LOST, 'acquire');
      resource.holder = undefined;
      return { outcome: 'uncertain', reason: LEASE_LOST };
    }
    if (live) return { outcome: 'contended', retryAfterMs: holder.expiresAt - now };
    if (holder && holder.key !== a.key) this.#conclude(holder.key, 'takeover');

    const row: KeyRow = existing ?? {
      key: a.key,
      resource: a.resource,
      digest,
      state: 'free',
      fence: 0,
      retrySafety: a.retrySafety,
      updatedAt: now,
    };
    this.#keys.set(a.key, row);
    resource.fence += 1;
    resource.holder = { key: a.key, expiresAt: now + ttlMs };
    row.fence = resource.fence;
    row.retrySafety = a.retrySafety;
    this.#transition(row, options.applying ? 'applying' : 'held', 'granted', 'acquire');
    return {
      outcome: 'granted',
      lease: { resource: a.resource, fence: resource.fence, ttlMs, expiresAt: now + ttlMs },
    };
  }

  async renew(
    action: Action,
    lease: Lease,
    ttlMs: number,
    options: { applying?: boolean } = {},
  ): Promise<Lease> {
    checkLeaseTtl(ttlMs, this.#limits);
    const { row, resource } = this.#holding(action, lease);
    const expiresAt = this.#now() + ttlMs;
    resource.holder = { key: row.key, expiresAt };
    if (options.applying && row.state === 'held')
      this.#transition(row, 'applying', 'prepared', 'renew');
    return { ...lease, ttlMs, expiresAt };
  }

  async complete(action: Action, lease: Lease, result: Result): Promise<Result> {
    checkBytes('result', result?.payload, this.#limits.maxPayloadBytes);
    const done = this.#keys.get(checkAction(action, this.#limits).key);
    if (done?.state === 'done' && done.fence === lease.fence) return copy(done.result!);
    const { row, resource } = this.#holding(action, lease);
    resource.holder = undefined;
    row.result = copy(result);
    this.#transition(row, 'done', 'completed', 'complete');
    return copy(result);
  }

  async markUncertain(action: Action, lease: Lease, reason: string): Promise<void> {
    const masked = checkReason(reason, this.#limits);
    const marked = this.#keys.get(checkAction(action, this.#limits).key);
    if (marked?.state === 'uncertain' && marked.fence === lease.fence) return;
    const { row, resource } = this.#holding(action, lease);
    resource.holder = undefined;
    this.#transition(row, 'uncertain', masked, 'markUncertain');
  }

  async release(action: Action, lease: Lease): Promise<void> {
    const a = checkAction(action, this.#limits);
    const resource = this.#resources.get(a.resource);
    if (resource && resource.fence === lease.fence && resource.holder?.key !== a.key) return;
    const { row } = this.#holding(action, lease);
    resource!.holder = undefined;
    this.#transition(row, 'free', 'released', 'release');
  }

  async resolveUncertain(key: Key, resolution: Resolution): Promise<ResolveOutcome> {
    checkText('key', key, this.#limits.maxKeyBytes);
    const verdict = checkResolution(resolution, this.#limits);
    const row = this.#keys.get(key);
    if (row && verdict.fence !== undefined && verdict.fence !== row.fence)
      throw new StaleVerdictError(key, verdict.fence, row.fence, row.state);
    if (row?.state === 'done')
      return { outcome: 'replayed', applied: true, result: copy(row.result!) };
    if (row?.state !== 'uncertain') throw new NotUncertainError(key, row?.state ?? 'unknown');
    const by = verdict.by ?? 'resolve';
    if (verdict.applied) {
      row.result = copy(verdict.result!);
      this.#transition(row, 'done', verdict.reason, by, verdict.identity);
      return { outcome: 'resolved', applied: true, result: copy(verdict.result!) };
    }
    row.reason = undefined;
    this.#transition(row, 'free', verdict.reason, by, verdict.identity);
    return { outcome: 'resolved', applied: false };
  }

  async addPendingVerdict(key: Key, resolution: Resolution): Promise<PendingVerdictOutcome> {
    checkText('key', key, this.#limits.maxKeyBytes);
    const verdict = checkResolution(resolution, this.#limits);
    const row = this.#keys.get(key);
    if (row && verdict.fence !== undefined && verdict.fence !== row.fence)
      throw new StaleVerdictError(key, verdict.fence, row.fence, row.state);
    if (row?.state === 'done')
      return { outcome: 'replayed', applied: true, result: copy(row.result!) };
    if (row?.state !== 'uncertain') throw new NotUncertainError(key, row?.state ?? 'unknown');
    const waiting = this.#pending.filter((one) => one.key === key && this.#waiting(one));
    if (waiting.length >= MAX_PENDING_VERDICTS) throw new PendingVerdictsFullError(key, row.fence);
    const entry: PendingVerdict = {
      id: this.#pending.length + 1,
      key,
      fence: row.fence,
      applied: verdict.applied,
      ...(verdict.applied ? { result: copy(verdict.result!) } : {}),
      reason: verdict.reason,
      by: verdict.by ?? 'resolve',
      ...(verdict.identity === undefined ? {} : { identity: verdict.identity }),
      state: 'pending',
      at: this.#now(),
    };
    this.#pending.push(entry);
    this.#note(row, pendingReason(verdict.applied, verdict.reason), verdict.by, verdict.identity);
    return { outcome: 'held', verdict: copyPending(entry) };
  }

  async pendingVerdicts(key: Key, page?: PendingVerdictPage): Promise<PendingVerdict[]> {
    const { afterId, limit, waiting } = checkPendingPage(page);
    return this.#pending
      .filter((one) => one.key === key && one.id > afterId && (!waiting || this.#waiting(one)))
      .slice(0, limit)
      .map((one) => this.#asItStands(one));
  }

  async pendingVerdictCounts(keys: Key[]): Promise<Map<Key, number>> {
    const wanted = new Set(keys);
    const counts = new Map<Key, number>();
    for (const one of this.#pending)
      if (wanted.has(one.key) && this.#waiting(one))
        counts.set(one.key, (counts.get(one.key) ?? 0) + 1);
    return counts;
  }

  async withdrawPendingVerdict(
    key: Key,
    id: number,
    withdrawal: Withdrawal,
  ): Promise<{ withdrawn: boolean; verdict: PendingVerdict } | undefined> {
    const { reason, by, identity } = checkWithdrawal(withdrawal, this.#limits);
    const entry = this.#pending[id - 1];
    if (entry === undefined || entry.key !== key) return undefined;
    if (entry.state !== 'pending') return { withdrawn: false, verdict: copyPending(entry) };
    const who = by ?? 'withdraw';
    entry.state = 'withdrawn';
    entry.why = `withdrawn by ${who}: ${reason}`;
    entry.judgedAt = this.#now();
    const row = this.#keys.get(key);
    if (row) this.#note(row, `pending verdict #${id} withdrawn: ${reason}`, who, identity);
    return { withdrawn: true, verdict: copyPending(entry) };
  }

  /** Whether a verdict still waits for a check on its key's current, uncertain attempt. */
  #waiting(entry: PendingVerdict): boolean {
    const row = this.#keys.get(entry.key);
    return entry.state === 'pending' && row?.state === 'uncertain' && row.fence === entry.fence;
  }

  /** A copy, read `late` (with why) when it is still pending but its key was decided or moved on. */
  #asItStands(entry: PendingVerdict): PendingVerdict {
    if (entry.state !== 'pending' || this.#waiting(entry)) return copyPending(entry);
    return { ...copyPending(entry), state: 'late', why: lateWhy(entry, this.#keys.get(entry.key)) };
  }

  async pendingVerdictKeys(limit: number): Promise<Key[]> {
    const keys: Key[] = [];
    for (const verdict of this.#pending) {
      if (keys.length >= limit) break;
      const row = this.#keys.get(verdict.key);
      if (verdict.state !== 'pending' || row?.state !== 'uncertain' || row.fence !== verdict.fence)
        continue;
      if (!keys.includes(verdict.key)) keys.push(verdict.key);
    }
    return keys;
  }

  async judgeVerdict(id: number, judgement: VerdictJudgement): Promise<PendingVerdict | undefined> {
    const entry = this.#pending[id - 1];
    if (entry === undefined) return undefined;
    if (entry.state !== 'pending') return copyPending(entry);
    const row = this.#keys.get(entry.key);
    if (row?.state !== 'uncertain' || row.fence !== entry.fence) {
      entry.state = 'late';
      entry.why = lateWhy(entry, row);
    } else if (judgement.accept) {
      await this.resolveUncertain(entry.key, {
        applied: entry.applied,
        reason: entry.reason,
        fence: entry.fence,
        ...(entry.applied ? { result: entry.result! } : {}),
        ...(entry.by === undefined ? {} : { by: entry.by }),
        ...(entry.identity === undefined ? {} : { identity: entry.identity }),
      });
      entry.state = 'accepted';
    } else {
      const why = checkReason(judgement.why, this.#limits);
      entry.state = 'refused';
      entry.why = why;
      this.#note(row, `verdict refused: ${why}`, entry.by, entry.identity);
    }
    entry.judgedAt = this.#now();
    return copyPending(entry);
  }

  async sweep(): Promise<SweepReport> {
    const now = this.#now();
    const report: SweepReport = { uncertain: [], freed: [] };
    for (const resource of this.#resources.values()) {
      if (!resource.holder || resource.holder.expiresAt > now) continue;
      const to = this.#conclude(resource.holder.key, 'sweep');
      if (to === 'uncertain') report.uncertain.push(resource.holder.key);
      if (to === 'free') report.freed.push(resource.holder.key);
      resource.holder = undefined;
    }
    return report;
  }

  async inspect(key: Key): Promise<KeyRecord | undefined> {
    const row = this.#keys.get(key);
    return row && toRecord(row);
  }

  async list(filter: ListFilter = {}): Promise<KeyRecord[]> {
    const direction = filter.oldest ? 1 : -1;
    return [...this.#keys.values()]
      .filter((row) => filter.state === undefined || row.state === filter.state)
      .sort((a, b) => direction * (a.updatedAt - b.updatedAt))
      .slice(0, filter.limit ?? Number.POSITIVE_INFINITY)
      .map(toRecord);
  }

  async events(key: Key): Promise<KeyEvent[]> {
    return this.#events.filter((event) => event.key === key).map((event) => ({ ...event }));
  }

  async uncertainBacklog(): Promise<UncertainBacklog> {
    const since = [...this.#keys.values()]
      .filter((row) => row.state === 'uncertain')
      .map((row) => row.updatedAt);
    if (since.length === 0) return { count: 0, oldestAgeMs: 0 };
    return { count: since.length, oldestAgeMs: Math.max(0, this.#now() - Math.min(...since)) };
  }

  async purge(options: { olderThanMs: number; force?: boolean }): Promise<number> {
    const cutoff = this.#now() - checkPurge(options, this.#limits);
    let purged = 0;
    for (const row of [...this.#keys.values()]) {
      if (row.state !== 'done' || row.updatedAt >= cutoff) continue;
      this.#keys.delete(row.key);
      this.#reconcileStarts.delete(row.key);
      purged += 1;
    }
    const kept = this.#events.filter((event) => this.#keys.has(event.key));
    this.#events.splice(0, this.#events.length, ...kept);
    const entry = this.#pending.filter((verdict) => this.#keys.has(verdict.key));
    this.#pending.splice(0, this.#pending.length, ...entry);
    return purged;
  }

  async claimReconciles(options: { limit: number; restartAfterMs: number }): Promise<KeyRecord[]> {
    const now = this.#now();
    const claimed: KeyRecord[] = [];
    for (const record of await this.list({ state: 'uncertain', oldest: true })) {
      if (claimed.length >= options.limit) break;
      const started = this.#reconcileStarts.get(record.key);
      if (started?.fence === record.fence && started.at > now - options.restartAfterMs) continue;
      this.#reconcileStarts.set(record.key, { fence: record.fence, at: now });
      claimed.push(record);
    }
    return claimed;
  }

  /** In one process, the first owner to ask leads until it resigns. */
  async leadSweep(owner: object): Promise<boolean> {
    this.#sweepLeader ??= owner;
    return this.#sweepLeader === owner;
  }

  async resignSweep(owner: object): Promise<void> {
    if (this.#sweepLeader === owner) this.#sweepLeader = undefined;
  }

  async admitAttempt(policy: BreakerPolicy, key: Key): Promise<BreakerAdmission> {
    const checked = checkBreakerPolicy(policy);
    const now = this.#now();
    return this.#breakers.admit(
      checked,
      checkText('key', key, this.#limits.maxKeyBytes),
      now,
      (probe) => {
        const row = this.#keys.get(probe);
        const holder = row && this.#resources.get(row.resource)?.holder;
        return holder?.key === probe && holder.expiresAt > now ? holder.expiresAt : undefined;
      },
    );
  }

  async recordOutcome(
    policy: BreakerPolicy,
    attempt: { key: Key; fence: Fence; outcome: BreakerOutcome },
  ): Promise<BreakerAnswer> {
    const checked = checkBreakerPolicy(policy);
    const known = checkBreakerAttempt(attempt, this.#limits.maxKeyBytes);
    return this.#breakers.record(checked, known, this.#now());
  }

  async setBreaker(group: string, command: BreakerCommand): Promise<BreakerAnswer> {
    return this.#breakers.set(checkBreakerGroup(group), checkBreakerCommand(command), this.#now());
  }

  async breaker(group: string): Promise<BreakerRecord | undefined> {
    return this.#breakers.get(checkBreakerGroup(group), this.#now());
  }

  async breakers(): Promise<BreakerRecord[]> {
    return this.#breakers.list(this.#now());
  }

  async breakerEvents(group: string): Promise<BreakerTransition[]> {
    return this.#breakers.events(checkBreakerGroup(group));
  }

  #resource(name: string): ResourceRow {
    let resource = this.#resources.get(name);
    if (!resource) {
      resource = { fence: 0 };
      this.#resources.set(name, resource);
    }
    return resource;
  }

  /** The fence rule shared by renew, complete, markUncertain and release: this lease's fence is current and this key holds it (expired but untaken is still held). */
  #holding(action: Action, lease: Lease): { row: KeyRow; resource: ResourceRow } {
    const a = checkAction(action, this.#limits);
    const row = this.#keys.get(a.key);
    const resource = this.#resources.get(a.resource);
    const holds =
      row !== undefined &&
      resource !== undefined &&
      lease.resource === a.resource &&
      row.resource === a.resource &&
      resource.fence === lease.fence &&
      row.fence === lease.fence &&
      resource.holder?.key === a.key &&
      (row.state === 'held' || row.state === 'applying');
    if (!holds) throw new FenceStaleError(a.resource, lease.fence);
    return { row, resource };
  }

  /** Ends an expired holder's claim: a key is never left pretending to hold a lease it lost. */
  #conclude(key: Key, by: string): KeyState | undefined {
    const row = this.#keys.get(key);
    if (row?.state === 'applying') {
      if (row.retrySafety === 'safe') this.#transition(row, 'free', LEASE_LOST_SAFE, by);
      else this.#transition(row, 'uncertain', LEASE_LOST, by);
      return row.state;
    }
    if (row?.state === 'held') {
      this.#transition(row, 'free', 'lease expired before apply', by);
      return row.state;
    }
    return undefined;
  }

  /** An event on a key that stays where it is (a verdict held or refused): the key's row is untouched. */
  #note(row: KeyRow, reason: string, by: string | undefined, identity: string | undefined): void {
    const event = eventOf(row, row.state, reason, by ?? 'resolve');
    const at = this.#now();
    this.#events.push(identity === undefined ? { ...event, at } : { ...event, identity, at });
  }

  #transition(row: KeyRow, to: KeyState, reason: string, by: string, identity?: string): void {
    const at = this.#now();
    const event = eventOf(row, to, reason, by);
    this.#events.push(identity === undefined ? { ...event, at } : { ...event, identity, at });
    row.state = to;
    row.updatedAt = at;
    if (to === 'uncertain') row.reason = reason;
  }
}

/** A transition of `row` to `to`. */
function eventOf(row: KeyRow, to: KeyState, reason: string, by: string) {
  return { key: row.key, from: row.state, to, fence: row.fence, reason, by };
}

const LEASE_LOST = 'lease lost during apply';
const LEASE_LOST_SAFE = 'lease lost during apply; declared safe to re-apply';

function copy(result: Result): Result {
  return { payload: new Uint8Array(result.payload) };
}

function copyPending(verdict: PendingVerdict): PendingVerdict {
  return verdict.result ? { ...verdict, result: copy(verdict.result) } : { ...verdict };
}

/** The event text of a pending verdict; the same words as the Postgres store's. */
function pendingReason(applied: boolean, reason: string): string {
  return `verdict pending until a worker checks it (${applied ? 'applied' : 'not applied'}): ${reason}`;
}

/** Why a pending verdict can no longer decide its key; the same words as the Postgres store's. */
function lateWhy(entry: PendingVerdict, row: KeyRow | undefined): string {
  if (row !== undefined && row.fence !== entry.fence)
    return `the key moved on to attempt (fence) ${row.fence}`;
  return `the key was decided before this verdict was checked (state: ${row?.state ?? 'unknown'})`;
}

function toRecord({ digest: _, result, reason, ...record }: KeyRow): KeyRecord {
  return {
    ...record,
    ...(result ? { result: copy(result) } : {}),
    ...(reason === undefined ? {} : { reason }),
  };
}

/** What a MemoryFencedSink write sees: which resource and fence it is writing under. */
export interface MemorySinkWrite {
  resource: string;
  fence: Fence;
}

/**
 * The reference FencedSink. Writes to one resource run one at a time, so the
 * fence comparison and the write cannot interleave with another writer's; a
 * failed write leaves the mark as it was, like a rolled-back transaction.
 */
export class MemoryFencedSink implements FencedSink<MemorySinkWrite> {
  readonly #highest = new Map<string, Fence>();
  readonly #serial = new KeyedGate(1);

  /** The highest fence accepted for `resource`, 0 if none. */
  highestFence(resource: string): Fence {
    return this.#highest.get(resource) ?? 0;
  }

  readFenced<T>(
    resource: string,
    fence: Fence,
    read: (tx: MemorySinkWrite) => Promise<T>,
  ): Promise<T> {
    return this.#serial.run(resource, () => {
      this.#highest.set(resource, Math.max(fence, this.highestFence(resource)));
      return read({ resource, fence });
    });
  }

  writeFenced<T>(
    resource: string,
    fence: Fence,
    write: (tx: MemorySinkWrite) => Promise<T>,
  ): Promise<T> {
    return this.#serial.run(resource, async () => {
      const previous = this.highestFence(resource);
      if (fence < previous) throw new FenceStaleError(resource, fence);
      this.#highest.set(resource, fence);
      try {
        return await write({ resource, fence });
      } catch (error) {
        this.#highest.set(resource, previous);
        throw error;
      }
    });
  }
}
