import type { Client, OperatorService } from '@temporalio/client';
import { searchAttributeKeys } from '../protocol/wire.js';

/** The names of the search attributes ReconcileWorkflow upserts. */
const searchAttributeNames: string[] = Object.values(searchAttributeKeys).map(
  (attribute) => attribute.name,
);

/**
 * Which of the library's search attributes the namespace lacks. Asked at worker
 * start, because an upsert of an unregistered attribute fails the workflow task
 * in a loop instead of failing once.
 */
export async function missingSearchAttributes(
  client: Client,
  namespace: string,
): Promise<string[]> {
  // Typed structurally: ConnectionLike only declares operatorService since SDK 1.15, every connection has it.
  const { operatorService } = client.connection as { operatorService?: OperatorService };
  if (!operatorService) throw new Error('the Client connection has no operator service');
  // Bounded: a worker start must not hang on a frontend that never answers this one call.
  const { customAttributes } = await client.connection.withDeadline(Date.now() + 10_000, () =>
    operatorService.listSearchAttributes({ namespace }),
  );
  return searchAttributeNames.filter((name) => customAttributes?.[name] === undefined);
}

/**
 * The exact `temporal` command that registers `missing` on `namespace` (all Keyword). Each
 * `--name` gets its own `--type`: the CLI pairs them, and given one `--type` for several names it
 * registers only the first one while reporting success.
 */
export function searchAttributeCreateCommand(namespace: string, missing: string[]): string {
  const names = missing.map((name) => `--name ${name} --type Keyword`).join(' ');
  return `temporal operator search-attribute create --namespace ${namespace} ${names}`;
}
