import { Runtime } from '@temporalio/worker';
import { type DurabilityRisk, StoreIsStandbyError } from '../core/errors.js';
import {
  type Durability,
  type DurabilityReport,
  risksUnder,
} from '../store/postgres/durability.js';
import { publishDurabilityRisks } from './backlog-gauges.js';

/** What a store on Postgres tells about its replication (`PgStore.checkDurability`). */
export interface ReplicatedStore {
  checkDurability(durability?: Durability): Promise<DurabilityReport>;
}

/** Whether `store` can tell about its replication. */
export function isReplicated(store: object): store is ReplicatedStore {
  return typeof (store as Partial<ReplicatedStore>).checkDurability === 'function';
}

/**
 * Reads the store's replication again after each sweep this process leads. A setup that passed
 * the start check can degrade while the workers run (Patroni's `synchronous_mode` without
 * `synchronous_mode_strict` turns asynchronous when its synchronous standby is gone), and from
 * then on a failover can lose an acknowledged commit and apply an effect twice, with nobody told.
 * A risk that appears is logged once as an error with its fix (a warning under `'accept-loss'`),
 * its going away once as info, and the count is the gauge `sideeffect_durability_risks` (zeroed,
 * like the backlog's, when the process stops leading).
 *
 * The workers keep running: stopping every effect because a standby died is the operator's
 * call, which Patroni's `synchronous_mode_strict` makes in the database itself.
 */
export class DurabilityWatch {
  readonly #store: ReplicatedStore;
  readonly #durability: Durability;
  /** The risks last logged, as one string per risk; the start check found none unless accepted. */
  #known = new Set<string>();

  constructor(store: ReplicatedStore, durability: Durability) {
    this.#store = store;
    this.#durability = durability;
  }

  /**
   * One reading: logs what changed since the last, sets the gauge, returns the risks standing.
   * A store it cannot read is logged and left for the next sweep (undefined), gauge unchanged.
   */
  async check(): Promise<DurabilityRisk[] | undefined> {
    const logger = Runtime.instance().logger;
    let report: DurabilityReport;
    try {
      // 'accept-loss' returns every risk instead of throwing; the declared setting then filters.
      report = await this.#store.checkDurability('accept-loss');
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (error instanceof StoreIsStandbyError)
        logger.error(`sideeffect: the store is a standby now: ${message}`);
      else logger.warn("sideeffect: could not read the store's replication", { error: message });
      return undefined;
    }
    const risks = risksUnder(report, this.#durability);
    const named = (risk: DurabilityRisk) => `${risk.kind}: ${risk.problem}`;
    const now = new Set(risks.map(named));
    const where = { host: report.facts.host };
    for (const risk of risks) {
      if (this.#known.has(named(risk))) continue;
      const message = `sideeffect: the store can now lose an acknowledged commit, and a failover then applies an effect twice: ${risk.problem} (fix: ${risk.fix})`;
      if (this.#durability === 'accept-loss') logger.warn(message, { ...where, kind: risk.kind });
      else logger.error(message, { ...where, kind: risk.kind });
    }
    for (const gone of this.#known)
      if (!now.has(gone)) logger.info(`sideeffect: durability risk gone: ${gone}`, { ...where });
    this.#known = now;
    publishDurabilityRisks(risks.length);
    return risks;
  }
}
