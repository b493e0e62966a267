/** Temporal's standard client configuration reaches the connections the worker, the CLI and the demo open. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryStore } from '../../src/store/memory.js';
import { clusterSettings, SideEffectPlugin } from '../../src/worker/index.js';
import { TEMPORAL_ADDRESS, uniqueTaskQueue } from '../support/temporal.js';

let dir: string;
let configFile: string;

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'sideeffect-cluster-'));
  writeFileSync(path.join(dir, 'ca.pem'), 'CA');
  configFile = path.join(dir, 'temporal.toml');
  writeFileSync(
    configFile,
    [
      '[profile.default]',
      `address = "${TEMPORAL_ADDRESS}"`,
      '',
      '[profile.cloud]',
      'address = "my-ns.a1b2c.tmprl.cloud:7233"',
      'namespace = "my-ns.a1b2c"',
      'api_key = "key-from-file"',
      '[profile.cloud.tls]',
      'server_name = "my-ns.a1b2c.tmprl.cloud"',
      `server_ca_cert_path = "${path.join(dir, 'ca.pem')}"`,
      '[profile.cloud.grpc_meta]',
      'x-team = "payments"',
      '',
      '[profile.tls-to-plaintext]',
      `address = "${TEMPORAL_ADDRESS}"`,
      '[profile.tls-to-plaintext.tls]',
      'disabled = false',
      '',
    ].join('\n'),
  );
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('clusterSettings', () => {
  it('defaults to the local dev server and the default namespace', () => {
    expect(clusterSettings({ env: {} })).toEqual({
      connectionOptions: { address: '127.0.0.1:7233' },
      namespace: 'default',
    });
  });

  it('takes address, namespace, API key, TLS and gRPC metadata from the TEMPORAL_PROFILE profile', () => {
    const settings = clusterSettings({ configFile, env: { TEMPORAL_PROFILE: 'cloud' } });
    expect(settings.namespace).toBe('my-ns.a1b2c');
    expect(settings.connectionOptions).toMatchObject({
      address: 'my-ns.a1b2c.tmprl.cloud:7233',
      apiKey: 'key-from-file',
      metadata: { 'x-team': 'payments' },
      tls: {
        serverNameOverride: 'my-ns.a1b2c.tmprl.cloud',
        serverRootCACertificate: new Uint8Array(Buffer.from('CA')),
      },
    });
  });

  it('lets TEMPORAL_* variables override the profile, and explicit options override both', () => {
    const env = {
      TEMPORAL_CONFIG_FILE: configFile,
      TEMPORAL_PROFILE: 'cloud',
      TEMPORAL_API_KEY: 'key-from-env',
      TEMPORAL_NAMESPACE: 'env-ns',
    };
    expect(clusterSettings({ env })).toMatchObject({
      namespace: 'env-ns',
      connectionOptions: { apiKey: 'key-from-env', address: 'my-ns.a1b2c.tmprl.cloud:7233' },
    });
    expect(clusterSettings({ env, address: 'elsewhere:7233', namespace: 'mine' })).toMatchObject({
      namespace: 'mine',
      connectionOptions: { address: 'elsewhere:7233' },
    });
    // An API key alone turns TLS on, as the temporal CLI does.
    expect(clusterSettings({ env: { TEMPORAL_API_KEY: 'k' } }).connectionOptions.tls).toBeTruthy();
  });
});

describe("a worker's connection from clusterSettings", () => {
  it('connects through a profile of the config file to the dev server', async () => {
    const { connectionOptions, namespace } = clusterSettings({ configFile, profile: 'default' });
    const connection = await NativeConnection.connect(connectionOptions);
    const plugin = new SideEffectPlugin({
      store: new MemoryStore(),
      effects: {},
      ttlMs: 1_000,
      sweepEveryMs: 0,
    });
    const worker = await Worker.create({
      connection,
      namespace,
      taskQueue: uniqueTaskQueue('cluster'),
      plugins: [plugin],
    });
    const running = worker.run();
    try {
      const { capabilities } = await plugin.client.workflowService.getSystemInfo({});
      expect(capabilities).toBeDefined();
    } finally {
      worker.shutdown();
      await running;
      await connection.close();
    }
  });

  it("uses the profile's TLS: a TLS profile cannot talk to the plaintext dev server", async () => {
    const { connectionOptions } = clusterSettings({ configFile, profile: 'tls-to-plaintext' });
    const refused = await NativeConnection.connect(connectionOptions).catch(
      (error: unknown) => error,
    );
    // rustls reading a plaintext HTTP/2 answer where it expected a TLS record.
    expect(String(refused)).toMatch(/TransportError.*InvalidContentType/);
  });
});
