import { Runtime } from '@temporalio/worker';
import type { SideEffectActivities } from '../activities/index.js';
import { libraryActivityNames } from '../workflows/protocol.js';
import { publishBacklog } from './backlog-gauges.js';

/** Runs sweepAndReconcile on a timer, one at a time; a failed sweep is logged and retried at the next tick. */
export class Sweeper {
  readonly #timer: ReturnType<typeof setInterval>;
  #running: Promise<void> | undefined;

  constructor(activities: SideEffectActivities, everyMs: number) {
    this.#timer = setInterval(() => {
      this.#running ??= activities[libraryActivityNames.sweepAndReconcile]()
        .then(publishBacklog, (error: unknown) =>
          Runtime.instance().logger.warn('sideeffect sweep failed', {
            error: error instanceof Error ? error.message : String(error),
          }),
        )
        .finally(() => {
          this.#running = undefined;
        });
    }, everyMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#running;
  }
}
