import { loadClientConnectConfig } from '@temporalio/envconfig';
import type { NativeConnectionOptions } from '@temporalio/worker';

/** Overrides of what Temporal's client configuration says; each wins over the profile and the environment. */
export interface ClusterOptions {
  /**
   * Frontend `host:port`.
   * @default `TEMPORAL_ADDRESS`, then the profile's, then `127.0.0.1:7233` (the dev server)
   */
  address?: string;
  /**
   * The namespace.
   * @default `TEMPORAL_NAMESPACE`, then the profile's, then `default`
   */
  namespace?: string;
  /**
   * Profile of the config file.
   * @default `TEMPORAL_PROFILE`, then `default`
   */
  profile?: string;
  /**
   * The TOML config file.
   * @default `TEMPORAL_CONFIG_FILE`, then the `temporal` CLI's own file
   */
  configFile?: string;
  /**
   * The environment to read `TEMPORAL_*` from.
   * @default process.env
   */
  env?: Record<string, string | undefined>;
}

/** Where and how to connect: the options a Connection or NativeConnection takes, and the namespace. */
export interface ClusterSettings {
  connectionOptions: NativeConnectionOptions & { address: string };
  namespace: string;
}

/**
 * Reads Temporal's standard client configuration (config file profile, then
 * `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`,
 * `TEMPORAL_GRPC_META_*`) the way the `temporal` CLI does, so a worker, the CLI
 * and the demo reach Temporal Cloud with the same settings as everything else
 * instead of silently dialing localhost.
 */
export function clusterSettings(options: ClusterOptions = {}): ClusterSettings {
  const env = Object.fromEntries(
    Object.entries(options.env ?? process.env).filter(
      (entry): entry is [string, string] => entry[1] !== undefined && entry[1] !== '',
    ),
  );
  const loaded = loadClientConnectConfig({
    ...(options.profile === undefined ? {} : { profile: options.profile }),
    ...(options.configFile === undefined ? {} : { configSource: { path: options.configFile } }),
    overrideEnvVars: env,
  });
  const connectionOptions = Object.fromEntries(
    Object.entries(loaded.connectionOptions).filter(([, value]) => value !== undefined),
  ) as NativeConnectionOptions;
  return {
    connectionOptions: {
      ...connectionOptions,
      address: options.address ?? connectionOptions.address ?? '127.0.0.1:7233',
    },
    namespace: options.namespace ?? loaded.namespace ?? 'default',
  };
}
