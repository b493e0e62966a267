import type pg from 'pg';
import { defaultSchema } from '../store/postgres/admin.js';
import { connectionConfig } from '../store/postgres/index.js';
import { type ClusterOptions, type ClusterSettings, clusterSettings } from '../worker/cluster.js';

/** Where the CLI finds the store and Temporal; the same variables the worker and the demo read. */
export interface CliEnvironment {
  /** `DATABASE_URL`, else the `PG*` variables: {@link connectionConfig}, as a worker reads them. */
  database: pg.PoolConfig;
  schema: string;
  /** Temporal's standard client configuration (profile file and TEMPORAL_* variables), read when a command needs Temporal. */
  temporal: (
    overrides: Pick<ClusterOptions, 'address' | 'namespace' | 'profile'>,
  ) => ClusterSettings;
  /** Module of the app's data converter (`SIDEEFFECT_DATA_CONVERTER`); `--data-converter` wins. */
  dataConverterPath?: string;
  /** The codec server's token (`SIDEEFFECT_CODEC_TOKEN`); `--token-file` wins. */
  codecToken?: string;
  /**
   * What a relative path on the command line (`--data-converter`, `--from-file`, `--token-file`)
   * is read from: the process's working directory, or a test's, which runs the CLI in-process.
   */
  cwd: string;
}

export function environment(
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): CliEnvironment {
  return {
    cwd,
    database: connectionConfig({ env }),
    schema: defaultSchema(env),
    temporal: (overrides) => clusterSettings({ env, ...definedOnly(overrides) }),
    ...(env.SIDEEFFECT_DATA_CONVERTER ? { dataConverterPath: env.SIDEEFFECT_DATA_CONVERTER } : {}),
    ...(env.SIDEEFFECT_CODEC_TOKEN !== undefined ? { codecToken: env.SIDEEFFECT_CODEC_TOKEN } : {}),
  };
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
