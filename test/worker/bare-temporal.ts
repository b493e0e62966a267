/**
 * A second Temporal dev server on its own free ports, in memory and WITHOUT the
 * SideEffect* search attributes: what a production or Cloud namespace looks like
 * before anybody registered them. The shared server at 127.0.0.1:7233 is never touched.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { Connection } from '@temporalio/client';
import { freePort } from '../faults/proxy.js';
import { temporalCliPath } from '../support/temporal.js';

export interface BareTemporal {
  address: string;
  stop(): Promise<void>;
}

export async function startBareTemporal(): Promise<BareTemporal> {
  const [grpc, http, metrics] = [await freePort(), await freePort(), await freePort()];
  let output = '';
  const child: ChildProcess = spawn(
    temporalCliPath(),
    [
      'server',
      'start-dev',
      '--headless',
      '--ip',
      '127.0.0.1',
      '--port',
      String(grpc),
      '--http-port',
      String(http),
      '--metrics-port',
      String(metrics),
      '--log-level',
      'error',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const address = `127.0.0.1:${grpc}`;
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  };
  const deadline = Date.now() + 150_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`temporal dev server exited:\n${output}`);
    const connection = await Connection.connect({ address, connectTimeout: 2_000 }).catch(
      () => undefined,
    );
    try {
      if (connection) {
        await connection.withDeadline(Date.now() + 2_000, () =>
          connection.workflowService.describeNamespace({ namespace: 'default' }),
        );
        return { address, stop };
      }
    } catch {
      // Not serving the namespace yet.
    } finally {
      await connection?.close().catch(() => {});
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`temporal dev server on ${address} never answered:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
