/**
 * `npm run test:timings`: a vitest reporter that writes each passing file's time into
 * test/timings.json, which orders the next runs (test/support/timings.ts), and prints the ten
 * slowest files and the total at the end. A failed file's time says nothing of its usual length,
 * so it keeps its previous one.
 */
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Reporter, TestModule, Vitest } from 'vitest/node';
import {
  mergeTimings,
  type RunTiming,
  readTimings,
  TIMINGS_FILE,
  timingsSummary,
} from './timings.js';

export default class TimingsReporter implements Reporter {
  #root = process.cwd();
  #started = Date.now();

  onInit(vitest: Vitest): void {
    this.#root = vitest.config.root;
    this.#started = Date.now();
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const root = this.#root;
    const run: RunTiming[] = modules.map((module) => {
      const { prepareDuration, collectDuration, setupDuration, duration } = module.diagnostic();
      return {
        file: path.relative(root, module.moduleId),
        ms: prepareDuration + collectDuration + setupDuration + duration,
        state: module.state(),
      };
    });
    const measured = new Map(
      run.filter((entry) => entry.state === 'passed').map((entry) => [entry.file, entry.ms]),
    );
    if (measured.size > 0) this.#write(measured);
    if (run.length > 0) console.log(`\n${timingsSummary(run, Date.now() - this.#started)}`);
  }

  #write(measured: ReadonlyMap<string, number>): void {
    const root = this.#root;
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
