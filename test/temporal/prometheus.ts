/**
 * Scraping a metrics worker (metrics-worker.ts) as Prometheus would, and the metric names the
 * README's alert expressions use, so tests check those expressions against real series.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { databaseUrl } from '../support/postgres.js';
import { REPO_ROOT } from '../support/temporal.js';

const WORKER = fileURLToPath(new URL('./metrics-worker.ts', import.meta.url));

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** One scrape, as Prometheus reads it: `name{label="value",...} number` lines. */
export async function scrape(url: string): Promise<Sample[]> {
  const text = await (await fetch(url)).text();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
      labels[key!] = value!;
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

/** The sum of every series of `name` carrying at least `labels`. */
export function total(
  samples: Sample[],
  name: string,
  labels: Record<string, string> = {},
): number {
  return samples
    .filter((s) => s.name === name)
    .filter((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0);
}

/** The metric names in the `promql` alert block ("What to alert on") of docs/operations.md, and which of them are counters (its table). */
export function alertMetricNames(): { names: string[]; counters: Set<string> } {
  const readme = readFileSync(path.join(REPO_ROOT, 'docs/operations.md'), 'utf8');
  // The block under "What to alert on" (the Outages section has a promql block of its own, about
  // breakers, whose metrics only a worker with a breaker exports).
  const block = /What to alert on[\s\S]*?```promql\n([\s\S]*?)```/.exec(readme)?.[1];
  if (!block) throw new Error('docs/operations.md has no promql block under "What to alert on"');
  const code = block
    .split('\n')
    .filter((line) => !line.trim().startsWith('#'))
    .join('\n');
  const names = [...new Set(code.match(/\bsideeffect_\w+/g) ?? [])];
  const counters = new Set(
    [...readme.matchAll(/^\| `(sideeffect_\w+)` \| counter \|/gm)].map((match) => match[1]!),
  );
  return { names, counters };
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

export interface MetricsWorker {
  child: ChildProcess;
  url: string;
  stop(): Promise<void>;
}

/** Starts metrics-worker.ts in its own process (its own Runtime and Prometheus endpoint). */
export async function startMetricsWorker(env: Record<string, string>): Promise<MetricsWorker> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl(),
      METRICS_ADDRESS: `127.0.0.1:${port}`,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('READY')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`metrics worker exited (${code}) before READY`)));
  });
  return {
    child,
    url: `http://127.0.0.1:${port}/metrics`,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 15_000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
}
