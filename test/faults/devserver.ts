/**
 * The fault harness's own Temporal dev server (the shared one at 127.0.0.1:7233 is never touched):
 * the same binary, its own ports and sqlite file, so it can be stopped and started again with
 * every workflow surviving in the file.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { openSync } from 'node:fs';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { SEARCH_ATTRIBUTES, temporalCliPath } from '../support/temporal.js';
import { freePort } from './proxy.js';

/** With `ui`, the server also serves its web UI on that port (else headless), pointed at a codec server if given. */
export interface OwnTemporalOptions {
  ui?: { port: number; codecEndpoint?: string };
}

export class OwnTemporal {
  #child: ChildProcess | undefined;
  #exited: Promise<void> | undefined;
  #ports: { grpc: number; ui: number; http: number; metrics: number } | undefined;

  constructor(
    readonly dir: string,
    readonly options: OwnTemporalOptions = {},
  ) {}

  get address(): string {
    if (!this.#ports) throw new Error('not started');
    return `127.0.0.1:${this.#ports.grpc}`;
  }

  async start(): Promise<void> {
    this.#ports ??= {
      grpc: await freePort(),
      ui: this.options.ui?.port ?? (await freePort()),
      http: await freePort(),
      metrics: await freePort(),
    };
    const { grpc, ui, http, metrics } = this.#ports;
    const log = openSync(path.join(this.dir, 'temporal.log'), 'a');
    const child = spawn(
      temporalCliPath(),
      [
        'server',
        'start-dev',
        '--ip',
        '127.0.0.1',
        '--port',
        String(grpc),
        '--ui-port',
        String(ui),
        '--http-port',
        String(http),
        '--metrics-port',
        String(metrics),
        ...(this.options.ui
          ? this.options.ui.codecEndpoint
            ? ['--ui-codec-endpoint', this.options.ui.codecEndpoint]
            : []
          : ['--headless']),
        '--db-filename',
        path.join(this.dir, 'faults.sqlite'),
        '--namespace',
        'default',
        '--log-level',
        'error',
        ...SEARCH_ATTRIBUTES.flatMap((name) => ['--search-attribute', `${name}=Keyword`]),
      ],
      { stdio: ['ignore', log, log], detached: true },
    );
    this.#child = child;
    this.#exited = new Promise((resolve) => child.once('exit', () => resolve()));
    await this.#waitAnswering();
  }

  /** SIGTERM, then SIGKILL if it lingers; resolves once the process is gone. */
  async stop(): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await this.#exited;
    clearTimeout(timer);
    this.#child = undefined;
  }

  async #waitAnswering(): Promise<void> {
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (this.#child?.exitCode != null)
        throw new Error(`temporal dev server exited (see ${this.dir}/temporal.log)`);
      let connection: Connection | undefined;
      try {
        connection = await Connection.connect({ address: this.address, connectTimeout: 2_000 });
        const conn = connection;
        await conn.withDeadline(Date.now() + 2_000, () =>
          conn.workflowService.describeNamespace({ namespace: 'default' }),
        );
        return;
      } catch (error) {
        if (Date.now() > deadline) throw error;
      } finally {
        await connection?.close().catch(() => {});
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}
