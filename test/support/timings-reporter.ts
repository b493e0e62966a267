/**
 * `npm run test:timings`: a vitest reporter that writes each passing file's time into
 * test/timings.json, which orders the next runs (test/support/timings.ts). A failed file's time
 * says nothing of its usual length, so it keeps its previous one.
 */
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Reporter, TestModule, Vitest } from 'vitest/node';
import { mergeTimings, readTimings, TIMINGS_FILE } from './timings.js';

export default class TimingsReporter implements Reporter {
  #root = process.cwd();

  onInit(vitest: Vitest): void {
    this.#root = vitest.config.root;
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const root = this.#root;
    const measured = new Map<string, number>();
    for (const module of modules) {
      if (module.state() !== 'passed') continue;
      const { prepareDuration, collectDuration, setupDuration, duration } = module.diagnostic();
      measured.set(
        path.relative(root, module.moduleId),
        prepareDuration + collectDuration + setupDuration + duration,
      );
    }
    if (measured.size === 0) return;
    const timings = mergeTimings(
      readTimings(root),
      measured,
      (file) => existsSync(path.join(root, file)),
      new Date().toISOString(),
    );
    writeFileSync(path.join(root, TIMINGS_FILE), `${JSON.stringify(timings, null, 2)}\n`);
    console.log(`wrote ${TIMINGS_FILE} (${measured.size} files measured)`);
  }
}
