import { Runtime } from '@temporalio/worker';
import type { SideEffectActivities } from '../activities/index.js';
import type { Store, SweepCoordination } from '../core/store.js';
import { libraryActivityNames } from '../protocol/wire.js';
import { publishBacklog } from './backlog-gauges.js';

/** How far each pause between sweeps strays from the period, as a fraction of it. */
const JITTER = 0.2;

/**
 * Runs sweepAndReconcile about every `everyMs` (±20 %, so workers started together do not
 * sweep in lockstep), one at a time, and only while this sweeper leads the store
 * (`SweepCoordination.leadSweep`: a Postgres advisory lock, or the first in-process sweeper of a
 * MemoryStore). Every worker runs one; one of them sweeps. A failed sweep is logged and
 * retried at the next tick.
 */
export class Sweeper {
  readonly #store: Store & SweepCoordination;
  readonly #activities: SideEffectActivities;
  readonly #everyMs: number;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;

  constructor(store: Store & SweepCoordination, activities: SideEffectActivities, everyMs: number) {
    this.#store = store;
    this.#activities = activities;
    this.#everyMs = everyMs;
    this.#schedule();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
    await this.#store.resignSweep?.(this).catch(() => {});
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
      const leads = this.#store.leadSweep ? await this.#store.leadSweep(this) : true;
      if (leads && !this.#stopped)
        publishBacklog(await this.#activities[libraryActivityNames.sweepAndReconcile]());
    } catch (error) {
      Runtime.instance().logger.warn('sideeffect sweep failed', {
        error: error instanceof Error ? error.message : String(error),
      });
    }
  }
}
