/** The local Temporal dev server that all Temporal tests share (see test/support/temporal.ts). */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Connection } from '@temporalio/client';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshSchema } from '../support/postgres.js';
import {
  DEV_SERVER_UI_URL,
  ensureTemporalDevServer,
  SEARCH_ATTRIBUTES,
  TEMPORAL_ADDRESS,
  TEMPORAL_DEV_SCRIPT,
  TEMPORAL_NAMESPACE,
  TEMPORAL_UI_URL,
  temporalCliPath,
  temporalHome,
  uniqueTaskQueue,
} from '../support/temporal.js';

const run = promisify(execFile);

describe('Temporal dev server', () => {
  let connection: Connection;

  beforeAll(async () => {
    await ensureTemporalDevServer();
    connection = await Connection.connect({ address: TEMPORAL_ADDRESS });
  });
  afterAll(async () => {
    await connection?.close();
  });

  it(`answers workflow-service calls on ${TEMPORAL_ADDRESS}`, async () => {
    const info = await connection.workflowService.getSystemInfo({});
    expect(info.serverVersion).toBeTruthy();
    const { namespaceInfo } = await connection.workflowService.describeNamespace({
      namespace: TEMPORAL_NAMESPACE,
    });
    expect(namespaceInfo?.name).toBe(TEMPORAL_NAMESPACE);
  });

  it(`serves the web UI on ${TEMPORAL_UI_URL}`, async () => {
    const response = await fetch(TEMPORAL_UI_URL);
    expect(response.status).toBe(200);
    expect(await response.text()).toMatch(/<html/i);
  });

  it('has our search attributes registered as Keyword', async () => {
    const { customAttributes } = await connection.operatorService.listSearchAttributes({
      namespace: TEMPORAL_NAMESPACE,
    });
    const INDEXED_VALUE_TYPE_KEYWORD = 2; // temporal.api.enums.v1.IndexedValueType.KEYWORD
    for (const name of SEARCH_ATTRIBUTES) {
      expect(customAttributes?.[name], name).toBe(INDEXED_VALUE_TYPE_KEYWORD);
    }
    // The CLI that temporal-dev.sh uses sees the same thing.
    const { stdout } = await run(temporalCliPath(), [
      'operator',
      'search-attribute',
      'list',
      '--address',
      TEMPORAL_ADDRESS,
      '--namespace',
      TEMPORAL_NAMESPACE,
      '--output',
      'json',
    ]);
    const listed = JSON.parse(stdout) as { customAttributes: Record<string, string> };
    for (const name of SEARCH_ATTRIBUTES) {
      expect(listed.customAttributes[name], name).toBe('INDEXED_VALUE_TYPE_KEYWORD');
    }
  });

  it('does not start a second server when temporal-dev.sh runs again', async () => {
    const pidFile = path.join(temporalHome(), 'server.pid');
    if (existsSync(pidFile)) {
      // Our own server: a second start says so and leaves it alone.
      const before = readFileSync(pidFile, 'utf8').trim();
      const { stdout, stderr } = await run(TEMPORAL_DEV_SCRIPT, []);
      expect(stderr).toContain('already running');
      expect(stdout).toContain(DEV_SERVER_UI_URL);
      expect(readFileSync(pidFile, 'utf8').trim()).toBe(before);
      const status = await run(TEMPORAL_DEV_SCRIPT, ['--status']);
      expect(status.stdout).toContain(`pid ${before}`);
      return;
    }
    // Someone else's server holds the ports: the script refuses clearly instead of starting another.
    const refused = await run(TEMPORAL_DEV_SCRIPT, []).then(
      () => undefined,
      (error: { code: number; stderr: string }) => error,
    );
    expect(refused?.code).not.toBe(0);
    expect(refused?.stderr).toMatch(/port 7233 on 127\.0\.0\.1 is held by another process/);
    expect(existsSync(pidFile)).toBe(false);
  });

  it('gives unique task queue names', () => {
    const a = uniqueTaskQueue('dev');
    expect(a).toMatch(/^dev-/);
    expect(uniqueTaskQueue('dev')).not.toBe(a);
  });
});

describe('Postgres test schemas', () => {
  it('isolates each fresh schema and drops it', async () => {
    const a = await freshSchema('devserver a');
    const b = await freshSchema('devserver-b');
    try {
      expect(a.schema).toMatch(/^t_devserver_a_/);
      await a.pool.query('create table probe (id int)');
      await a.pool.query('insert into probe values (1)');
      await b.pool.query('create table probe (id int)');
      expect((await b.pool.query('select count(*)::int as n from probe')).rows[0].n).toBe(0);
      expect((await a.pool.query('select count(*)::int as n from probe')).rows[0].n).toBe(1);
    } finally {
      await a.drop();
      await b.drop();
    }
    const pool = new pg.Pool({ connectionString: a.config.connectionString });
    try {
      const { rowCount } = await pool.query('select 1 from pg_namespace where nspname = any($1)', [
        [a.schema, b.schema],
      ]);
      expect(rowCount).toBe(0);
    } finally {
      await pool.end();
    }
  });
});
