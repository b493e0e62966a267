import { hostname, userInfo } from 'node:os';
import { Client, Connection, type DataConverter } from '@temporalio/client';
import type { ClusterSettings } from '../worker/cluster.js';

/**
 * The Temporal identity of this CLI process, `sideeffect-cli:<OS user>@<host> (pid N)`, as the
 * `temporal` CLI writes its own: the audit trail then says which account on which machine sent a
 * verdict, beside the `--by` it typed. Still declared by this process, not proven (see
 * docs/operations.md, "Who decided").
 */
export function cliIdentity(): string {
  let user: string;
  try {
    user = userInfo().username;
  } catch {
    user = process.env.USER ?? process.env.LOGNAME ?? 'unknown-user';
  }
  return `sideeffect-cli:${user}@${hostname()} (pid ${process.pid})`;
}

/** A connection to Temporal, or undefined when it does not answer within 3 s. */
export async function connectTemporal(settings: ClusterSettings): Promise<Connection | undefined> {
  try {
    return await Connection.connect({ ...settings.connectionOptions, connectTimeout: 3_000 });
  } catch {
    return undefined;
  }
}

/** A Client with the CLI's identity, through the app's data converter when one was given. */
export function temporalClient(
  connection: Connection,
  namespace: string,
  dataConverter: DataConverter | undefined,
): Client {
  return new Client({
    connection,
    namespace,
    identity: cliIdentity(),
    ...(dataConverter ? { dataConverter } : {}),
  });
}

/**
 * Temporal unreachable: a verdict still goes to the store (the ReconcileWorkflow reads it at its
 * next recheck), but the run exits 3 so a script knows the waiting workflow was not told.
 */
export function unreachable(temporal: ClusterSettings): string {
  return `sideeffect: Temporal at ${temporal.connectionOptions.address} (namespace ${temporal.namespace}) does not answer; recording the verdict in the store as a pending verdict for a worker's check (exit 3): once Temporal answers, a worker's sweeper prompts the key's ReconcileWorkflow within about a minute, which checks it and, accepted, tells the waiting workflow. Check --address, --namespace, --profile or TEMPORAL_ADDRESS`;
}
