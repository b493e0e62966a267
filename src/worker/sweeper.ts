import { Runtime } from '@temporalio/worker';
import type { SideEffectActivities } from '../activities/index.js';
import type { Store, SweepCoordination } from '../core/store.js';
import { libraryActivityNames } from '../protocol/wire.js';
import { clearBacklog, publishBacklog } from './backlog-gauges.js';

/** How far each pause between sweeps strays from the period, as a fraction of it. */
const JITTER = 0.2;

/**
 * Runs sweepAndReconcile about every `everyMs` (±20 %, so workers started together do not
 * sweep in lockstep), one at a time, and only while this sweeper leads the store
 * (`SweepCoordination.leadSweep`: a Postgres advisory lock, or the first in-process sweeper of a
 * MemoryStore). Every worker runs one; one of them sweeps and reports the backlog gauges. A
 * failed sweep is logged and retried at the next tick.
 */
export class Sweeper {
  readonly #store: Store & SweepCoordination;
  readonly #activities: SideEffectActivities;
  readonly #everyMs: number;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;
  /** Leads since the last tick asked, and no loss was heard since: only then may it report. */
  #leading = false;
  /** This sweeper's backlog is on the gauges: they must read 0 the moment it stops leading. */
  #reporting = false;

  readonly #afterSweep: (() => Promise<unknown>) | undefined;

  /** `afterSweep` runs after each sweep this sweeper led (a failure is logged like the sweep's). */
  constructor(
    store: Store & SweepCoordination,
    activities: SideEffectActivities,
    everyMs: number,
    afterSweep?: () => Promise<unknown>,
  ) {
    this.#store = store;
    this.#activities = activities;
    this.#everyMs = everyMs;
    this.#afterSweep = afterSweep;
    this.#schedule();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
    await this.#store.resignSweep?.(this).catch(() => {});
    this.#stopReporting();
  }

  /**
   * A process that no longer leads must not keep its last backlog on the gauges: alerts take
   * the max over processes, and that stale value would outlive every verdict.
   */
  #stopReporting(): void {
    this.#leading = false;
    if (!this.#reporting) return;
    this.#reporting = false;
    clearBacklog();
  }

  #schedule(): void {
    if (this.#stopped) return;
    const pause = this.#everyMs * (1 - JITTER + 2 * JITTER * Math.random());
    this.#timer = setTimeout(() => {
      this.#running = this.#tick().finally(() => {
        this.#running = undefined;
        this.#schedule();
      });
    }, pause);
  }

  async #tick(): Promise<void> {
    try {
      const leads = this.#store.leadSweep
        ? await this.#store.leadSweep(this, () => this.#stopReporting())
        : true;
      if (!leads) {
        this.#stopReporting();
        return;
      }
      this.#leading = true;
      if (this.#stopped) return;
      const report = await this.#activities[libraryActivityNames.sweepAndReconcile]();
      // Leadership may have ended during the sweep; its report is then not ours to publish.
      if (!this.#leading || this.#stopped) return;
      publishBacklog(report);
      this.#reporting = true;
      await this.#afterSweep?.();
    } catch (error) {
      Runtime.instance().logger.warn('sideeffect sweep failed', {
        error: error instanceof Error ? error.message : String(error),
      });
    }
  }
}
