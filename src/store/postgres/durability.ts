import type pg from 'pg';
import {
  DurabilityAtRiskError,
  type DurabilityRisk,
  InvalidActionError,
  StoreIsStandbyError,
} from '../../core/errors.js';
import { connectionTarget } from './connection.js';

/**
 * How a worker treats what the store's server says about its replication:
 * - `'checked'` (the default): read it, and refuse to start (DurabilityAtRiskError) when a
 *   failover or a crash can lose an acknowledged commit;
 * - `'managed'`: the service replicates below Postgres, where Postgres cannot see it (RDS Multi-AZ
 *   DB instance, Aurora, Cloud SQL HA): the replication verdict is skipped, and only what no
 *   service can make durable (`synchronous_commit = off`) is still refused;
 * - `'accept-loss'`: start anyway, each risk logged.
 *
 * A standby is refused under every setting.
 */
export type Durability = 'checked' | 'managed' | 'accept-loss';

const DURABILITIES: readonly Durability[] = ['checked', 'managed', 'accept-loss'];

/** What the store's server says about its replication, as the store's role sees it. */
export interface ReplicationFacts {
  /** Where the connection went: host, port, database and user. */
  host: string;
  /** `pg_is_in_recovery()`: a standby. */
  inRecovery: boolean;
  /**
   * The physical standbys streaming from it (`pg_stat_replication`): `syncState` is `async`,
   * `potential`, `sync` or `quorum`, or null where the role lacks `pg_read_all_stats`.
   */
  standbys: { name: string; syncState: string | null }[];
  /** Physical replication slots nobody streams from: a standby that is away, and may be promoted. */
  idleSlots: string[];
  synchronousStandbyNames: string;
  /** `synchronous_commit` in a session of the store's role (its `ALTER ROLE ... SET` included). */
  synchronousCommit: string;
}

/** How the server replicates: what a failover could be to. */
type ReplicationMode = 'standby' | 'single' | 'synchronous' | 'asynchronous';

/** The verdict on one server: how it replicates, what can lose a commit, and what is fine to know. */
export interface DurabilityReport {
  facts: ReplicationFacts;
  mode: ReplicationMode;
  /** Each way an acknowledged commit can be lost, with its fix; empty when none. */
  risks: DurabilityRisk[];
  /** What holds, and what it rests on, in plain words. */
  notes: string[];
}

const SYNC_FIX =
  "make the standbys synchronous: set synchronous_standby_names (e.g. 'ANY 1 (*)') and keep synchronous_commit on, or, under Patroni, synchronous_mode: true";

/**
 * The verdict on `facts`, without the database: why a setup may lose an acknowledged commit.
 * A lost commit is a key's record of an applied effect gone while the effect stays done
 * downstream, so the next call applies it again with the same fence.
 */
export function durabilityVerdict(facts: ReplicationFacts): DurabilityReport {
  const risks: DurabilityRisk[] = [];
  const notes: string[] = [];
  if (facts.inRecovery) return { facts, mode: 'standby', risks, notes };
  const streaming = facts.standbys.map((s) => s.name || '(unnamed)');
  const away = facts.idleSlots;
  const replicas = streaming.length + away.length;
  const syncNames = facts.synchronousStandbyNames.trim();
  const commit = facts.synchronousCommit;
  let mode: ReplicationMode;
  if (replicas === 0) {
    mode = 'single';
    notes.push(
      'a single primary with no standby or replication slot: no failover can lose a commit to a standby that lacks it (if your service fails over below Postgres, declare it: durability managed)',
    );
  } else if (syncNames === '') {
    mode = 'asynchronous';
    const who = [
      ...streaming.map((name) => `standby "${name}"`),
      ...away.map((slot) => `replication slot "${slot}" (a standby not connected now)`),
    ].join(', ');
    risks.push({
      kind: 'asynchronous',
      problem: `asynchronous replication to ${who}: synchronous_standby_names is empty, so a commit is acknowledged before any standby has it, and a failover to a standby behind loses it (the effect it recorded is then applied twice)`,
      fix: SYNC_FIX,
    });
  } else {
    mode = 'synchronous';
    notes.push(`synchronous_standby_names = '${syncNames}': a commit waits for the standbys named`);
    const asynchronous = facts.standbys.filter((s) => s.syncState === 'async');
    if (asynchronous.length > 0)
      notes.push(
        `asynchronous as well: ${asynchronous.map((s) => `"${s.name}"`).join(', ')}; a failover must promote only a synchronous standby (Patroni's synchronous_mode does)`,
      );
    if (facts.standbys.length > 0 && facts.standbys.every((s) => s.syncState === null))
      notes.push(
        "each standby's sync_state is hidden from this role (grant it pg_monitor to see them): judged by synchronous_standby_names",
      );
  }
  if (commit === 'off')
    risks.push({
      kind: 'commit-off',
      problem:
        "synchronous_commit is off for the store's role: a commit is acknowledged before its WAL is on disk, so a crash (no failover needed) loses the last ones",
      fix: "set it on for the store's role (ALTER ROLE <role> RESET synchronous_commit, or SET synchronous_commit = on), and remove it from the connection string's options",
    });
  else if (commit === 'local' && mode === 'synchronous')
    risks.push({
      kind: 'commit-local',
      problem:
        "synchronous_commit is local for the store's role: its commits do not wait for the synchronous standby, so a failover can lose them",
      fix: "set synchronous_commit to on (or remote_apply) for the store's role",
    });
  else if (commit === 'remote_write' && mode === 'synchronous')
    notes.push(
      'synchronous_commit = remote_write: a commit waits until the standby has written it, not flushed it; lost only if both servers fail at once',
    );
  return { facts, mode, risks, notes };
}

/** Reads {@link ReplicationFacts} in one round trip, naming only pg_catalog. */
export async function readReplication(pool: pg.Pool): Promise<ReplicationFacts> {
  const { rows } = await pool.query<{
    in_recovery: boolean;
    synchronous_commit: string;
    synchronous_standby_names: string;
    standbys: { name: string | null; sync_state: string | null }[];
    idle_slots: string[];
  }>(REPLICATION_SQL);
  const row = rows[0]!;
  return {
    host: connectionTarget(pool),
    inRecovery: row.in_recovery,
    standbys: row.standbys.map((s) => ({ name: s.name ?? '', syncState: s.sync_state })),
    idleSlots: row.idle_slots,
    synchronousStandbyNames: row.synchronous_standby_names,
    synchronousCommit: row.synchronous_commit,
  };
}

/**
 * Logical walsenders (a subscription, a CDC tool) are no failover target and are left out; so is
 * a base backup in progress. A standby is asked nothing about its own standbys.
 */
const REPLICATION_SQL = `select pg_catalog.pg_is_in_recovery() as in_recovery,
  pg_catalog.current_setting('synchronous_commit') as synchronous_commit,
  pg_catalog.current_setting('synchronous_standby_names') as synchronous_standby_names,
  coalesce((select pg_catalog.json_agg(pg_catalog.json_build_object('name', r.application_name, 'sync_state', r.sync_state))
     from pg_catalog.pg_stat_replication r
    where not pg_catalog.pg_is_in_recovery()
      and coalesce(r.state operator(pg_catalog.<>) 'backup', true)
      and not exists (select from pg_catalog.pg_replication_slots s
                       where s.active_pid operator(pg_catalog.=) r.pid and s.slot_type operator(pg_catalog.=) 'logical')),
    '[]') as standbys,
  coalesce((select pg_catalog.array_agg(s.slot_name::text order by s.slot_name)
     from pg_catalog.pg_replication_slots s
    where not pg_catalog.pg_is_in_recovery()
      and s.slot_type operator(pg_catalog.=) 'physical' and not s.active),
    '{}') as idle_slots`;

/** Refuses `durability` unless it is one of {@link Durability}'s values (undefined is `'checked'`). */
export function checkedDurability(durability: unknown): Durability {
  if (durability === undefined) return 'checked';
  if (DURABILITIES.includes(durability as Durability)) return durability as Durability;
  throw new InvalidActionError(
    'durability',
    `must be one of ${DURABILITIES.map((d) => `'${d}'`).join(', ')}, got ${JSON.stringify(durability) ?? String(durability)}`,
  );
}

/**
 * Whether the store behind `pool` keeps every commit it acknowledges, as a worker's start checks
 * it: at-most-once is only as durable as the store's last acknowledged commit, and a failover to
 * an asynchronous standby loses it without a word. Throws StoreIsStandbyError on a standby (under
 * every `durability`), DurabilityAtRiskError when a risk stands and `durability` is `'checked'`
 * (with `'managed'`, only `synchronous_commit = off` stands: no service replicates a commit that
 * is not written yet). Returns the report otherwise: with `'accept-loss'` its risks are the
 * caller's to log. Connection failures are thrown as pg raised them.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const report = await checkDurability(pool); // throws when a failover can apply an effect twice
 * console.log(report.mode, report.notes);
 * ```
 */
export async function checkDurability(
  pool: pg.Pool,
  options: { durability?: Durability } = {},
): Promise<DurabilityReport> {
  const durability = checkedDurability(options.durability);
  const report = durabilityVerdict(await readReplication(pool));
  return judged(report, durability);
}

/** The risks that stand under `durability`: `'managed'` leaves only `synchronous_commit = off`. */
export function risksUnder(report: DurabilityReport, durability: Durability): DurabilityRisk[] {
  return durability === 'managed'
    ? report.risks.filter((risk) => risk.kind === 'commit-off')
    : report.risks;
}

/** The report as `durability` leaves it, or the error that refuses it. */
export function judged(report: DurabilityReport, durability: Durability): DurabilityReport {
  if (report.mode === 'standby') throw new StoreIsStandbyError(report.facts.host);
  const risks = risksUnder(report, durability);
  if (risks.length > 0 && durability !== 'accept-loss')
    throw new DurabilityAtRiskError(report.facts.host, risks);
  return { ...report, risks };
}
