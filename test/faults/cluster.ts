/**
 * Everything a fault run stands on: its own Temporal dev server, a cuttable proxy in front of
 * Postgres, a fresh schema (store + ledger), the workflows bundled once, and N supervised worker
 * processes (restarted whenever they die) whose stdout lines are parsed into events.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode } from '@temporalio/worker';
import { migrate, PgFencedSink, PgStore } from '../../src/store/postgres/index.js';
import { databaseUrl, type FreshSchema, freshSchema } from '../support/postgres.js';
import { REPO_ROOT } from '../support/temporal.js';
import { OwnTemporal } from './devserver.js';
import { LEDGER_DDL } from './effects.js';
import { CuttableProxy } from './proxy.js';

const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));
const WORKFLOWS = fileURLToPath(new URL('./workflows.ts', import.meta.url));

export interface ClusterOptions {
  workers: number;
  ttlMs: number;
  sweepEveryMs: number;
  /** Probe and operator read the ledger after fencing off old holders (see effects.ts). */
  fencedProbe: boolean;
  /** Delay before a dead worker is started again. */
  restartDelayMs?: number;
  log?: (line: string) => void;
}

/** A line a worker printed: READY, or APPLY/WROTE/LOST/STALE/CONTENDED with the key. */
export interface WorkerEvent {
  slot: WorkerSlot;
  kind: string;
  key: string;
}

export class WorkerSlot {
  child: ChildProcess | undefined;
  paused = false;
  starts = 0;
  ready = false;

  constructor(
    readonly index: number,
    readonly appName: string,
  ) {}

  get alive(): boolean {
    return (
      this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null
    );
  }
}

export class Cluster {
  readonly slots: WorkerSlot[] = [];
  readonly #listeners = new Set<(event: WorkerEvent) => void>();
  #closing = false;

  private constructor(
    readonly options: ClusterOptions,
    readonly dir: string,
    readonly tag: string,
    readonly temporal: OwnTemporal,
    readonly proxy: CuttableProxy,
    readonly db: FreshSchema,
    readonly store: PgStore,
    readonly sink: PgFencedSink,
    readonly connection: Connection,
    readonly client: Client,
    readonly taskQueue: string,
    readonly bundlePath: string,
  ) {}

  static async start(options: ClusterOptions): Promise<Cluster> {
    const dir = mkdtempSync(path.join(tmpdir(), 'sideeffect-faults-'));
    const tag = path
      .basename(dir)
      .split('-')
      .at(-1)!
      .toLowerCase()
      .replace(/[^a-z0-9]/g, 'x');
    const log = options.log ?? (() => {});
    const temporal = new OwnTemporal(dir);
    const proxy = new CuttableProxy('127.0.0.1', Number(new URL(databaseUrl()).port || 5432));
    const bundled = bundleWorkflowCode({
      workflowsPath: WORKFLOWS,
      logger: { info() {}, warn() {}, error() {}, debug() {}, trace() {}, log() {} },
    });
    bundled.catch(() => {}); // awaited below; a failure before then must not go unhandled
    let db: FreshSchema | undefined;
    let cluster: Cluster | undefined;
    try {
      await Promise.all([temporal.start(), proxy.listen()]);
      log(`own Temporal dev server at ${temporal.address}, Postgres proxy on :${proxy.port}`);
      db = await freshSchema('faults');
      db.pool.on('error', () => {});
      await migrate(db.pool, { schema: db.schema });
      await db.pool.query(LEDGER_DDL);
      const bundlePath = path.join(dir, 'workflows.bundle.js');
      writeFileSync(bundlePath, (await bundled).code);
      const connection = await Connection.connect({ address: temporal.address });
      const client = new Client({ connection, namespace: 'default' });
      cluster = new Cluster(
        options,
        dir,
        tag,
        temporal,
        proxy,
        db,
        new PgStore({ pool: db.pool, schema: db.schema }),
        new PgFencedSink({ pool: db.pool, schema: db.schema }),
        connection,
        client,
        `faults-${tag}`,
        bundlePath,
      );
      const started = cluster;
      for (let i = 0; i < options.workers; i++)
        started.slots.push(new WorkerSlot(i, `fw-${tag}-${i}`));
      await Promise.all(started.slots.map((slot) => started.#spawn(slot)));
      log(
        `${options.workers} workers ready on task queue ${started.taskQueue}, schema ${db.schema}`,
      );
      return started;
    } catch (error) {
      // Leave nothing behind: our dev server in particular would outlive the test process.
      if (cluster) await cluster.close({ keepFiles: true }).catch(() => {});
      else {
        await temporal.stop().catch(() => {});
        await proxy.close().catch(() => {});
        await db?.drop().catch(() => {});
      }
      throw error;
    }
  }

  /** The application_name prefix of every worker backend (for pg_terminate_backend). */
  get appNamePrefix(): string {
    return `fw-${this.tag}-`;
  }

  onEvent(listener: (event: WorkerEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Resolves with the next event of `kind` whose key starts with `prefix`, from a running, unpaused worker. */
  next(kind: string, prefix: string, timeoutMs: number): Promise<WorkerEvent | undefined> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        off();
        resolve(undefined);
      }, timeoutMs);
      const off = this.onEvent((event) => {
        if (event.kind !== kind || !event.key.startsWith(prefix)) return;
        if (!event.slot.alive || event.slot.paused) return;
        clearTimeout(timer);
        off();
        resolve(event);
      });
    });
  }

  /** SIGKILL; the supervisor starts it again after restartDelayMs. */
  kill(slot: WorkerSlot): boolean {
    if (!slot.alive || slot.paused) return false;
    slot.child!.kill('SIGKILL');
    return true;
  }

  /** SIGSTOP for `ms`, then SIGCONT. */
  async pause(slot: WorkerSlot, ms: number): Promise<boolean> {
    if (!slot.alive || slot.paused) return false;
    slot.paused = true;
    slot.child!.kill('SIGSTOP');
    await new Promise((resolve) => setTimeout(resolve, ms));
    if (slot.alive) slot.child!.kill('SIGCONT');
    slot.paused = false;
    return true;
  }

  /** Workers that are up and not paused. */
  running(): WorkerSlot[] {
    return this.slots.filter((slot) => slot.alive && slot.ready && !slot.paused);
  }

  /** Stops everything; `keepSchema`/`keepFiles` leave the tables and the logs for a post-mortem. */
  async close(options: { keepSchema?: boolean; keepFiles?: boolean } = {}): Promise<void> {
    this.#closing = true;
    await Promise.all(
      this.slots.map(async (slot) => {
        const child = slot.child;
        if (!child || !slot.alive) return;
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGCONT');
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      }),
    );
    await this.connection.close().catch(() => {});
    await this.temporal.stop();
    await this.proxy.close();
    if (options.keepSchema) await this.db.pool.end().catch(() => {});
    else await this.db.drop();
    if (options.keepFiles) this.options.log?.(`logs kept in ${this.dir}`);
    else rmSync(this.dir, { recursive: true, force: true });
  }

  #spawn(slot: WorkerSlot): Promise<void> {
    slot.starts++;
    slot.ready = false;
    const log = openSync(path.join(this.dir, `worker-${slot.index}.log`), 'a');
    const child = spawn(process.execPath, ['--import', 'tsx', WORKER], {
      cwd: REPO_ROOT,
      env: {
        ...process.env,
        SCHEMA: this.db.schema,
        DATABASE_URL: proxiedUrl(this.proxy.port),
        APP_NAME: slot.appName,
        TEMPORAL: this.temporal.address,
        TASK_QUEUE: this.taskQueue,
        BUNDLE: this.bundlePath,
        TTL_MS: String(this.options.ttlMs),
        SWEEP_MS: String(this.options.sweepEveryMs),
        FENCED_PROBE: this.options.fencedProbe ? '1' : '0',
      },
      stdio: ['ignore', 'pipe', log],
    });
    slot.child = child;
    const ready = new Promise<void>((resolve, reject) => {
      createInterface({ input: child.stdout! }).on('line', (line) => {
        const space = line.indexOf(' ');
        const kind = space < 0 ? line : line.slice(0, space);
        const key = space < 0 ? '' : line.slice(space + 1).split(' ')[0]!;
        if (kind === 'READY') {
          slot.ready = true;
          resolve();
        }
        for (const listener of this.#listeners) listener({ slot, kind, key });
      });
      // A worker that cannot start at all is a broken harness, not a fault: fail the first start.
      child.once('exit', (code, signal) => {
        if (slot.starts === 1 && !slot.ready)
          reject(
            new Error(
              `worker ${slot.index} exited (${code ?? signal}) before READY; see ${this.dir}`,
            ),
          );
        resolve();
      });
    });
    child.once('exit', () => {
      slot.ready = false;
      if (this.#closing) return;
      setTimeout(() => {
        if (!this.#closing) void this.#spawn(slot);
      }, this.options.restartDelayMs ?? 500);
    });
    return ready;
  }
}

function proxiedUrl(port: number): string {
  const url = new URL(databaseUrl());
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return url.toString();
}
