/**
 * PgBouncer in transaction pooling mode in front of the test Postgres, as managed Postgres
 * offerings put it: consecutive transactions of one client connection may run on different server
 * connections, so session state and named prepared statements do not carry over. Debian's
 * `pgbouncer` package (installed by .ci/run); started on a free port, stopped by `stop()`.
 *
 *   const bouncer = await startPgBouncer();
 *   const pool = new pg.Pool({ connectionString: bouncer.url });
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { access, chmod, constants, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from '../faults/proxy.js';
import { databaseUrl } from './postgres.js';

export const PGBOUNCER = '/usr/sbin/pgbouncer';

export interface PgBouncer {
  /** `databaseUrl()` with host and port pointing at PgBouncer. */
  url: string;
  stop(): Promise<void>;
}

export async function startPgBouncer(
  options: { serverConnections?: number } = {},
): Promise<PgBouncer> {
  // Without the binary, spawn only emits 'error' and the wait for its exit would never end.
  await access(PGBOUNCER, constants.X_OK).catch(() => {
    throw new Error(`${PGBOUNCER} is not installed: apt-get install pgbouncer (.ci/run does)`);
  });
  const target = new URL(databaseUrl());
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'sideeffect-pgbouncer-'));
  const user = decodeURIComponent(target.username || 'postgres');
  const config = join(dir, 'pgbouncer.ini');
  await writeFile(join(dir, 'users.txt'), `"${user}" "${decodeURIComponent(target.password)}"\n`);
  await writeFile(
    config,
    `[databases]
* = host=${target.hostname} port=${target.port || 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = ${target.password ? 'plain' : 'trust'}
auth_file = ${join(dir, 'users.txt')}
pool_mode = transaction
default_pool_size = ${options.serverConnections ?? 20}
max_client_conn = 500
logfile =
pidfile =
ignore_startup_parameters = extra_float_digits
`,
  );
  // PgBouncer refuses to run as root; as root (CI) it drops to the postgres user, who must read the files.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    await chmod(dir, 0o755);
    await chmod(config, 0o644);
    await chmod(join(dir, 'users.txt'), 0o644);
  }
  const child: ChildProcess = spawn(PGBOUNCER, asRoot ? ['-u', 'postgres', config] : [config], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    log = (log + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
    await exited;
    await rm(dir, { recursive: true, force: true });
  };
  for (let attempt = 0; ; attempt++) {
    const client = new pg.Client({
      connectionString: url.toString(),
      connectionTimeoutMillis: 1_000,
    });
    try {
      await client.connect();
      await client.query('select 1');
      await client.end();
      return { url: url.toString(), stop };
    } catch (error) {
      await client.end().catch(() => {});
      if (attempt >= 50 || child.exitCode !== null) {
        await stop();
        throw new Error(`PgBouncer (${PGBOUNCER}) did not start: ${String(error)}\n${log}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}
