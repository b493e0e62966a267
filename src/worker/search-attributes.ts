import type { Client } from '@temporalio/client';
import {
  registeredSearchAttributes,
  searchAttributeNames,
} from '../activities/search-attributes.js';

/**
 * Which of the library's search attributes the namespace lacks. Asked at worker
 * start, because an upsert of an unregistered attribute fails the workflow task
 * in a loop instead of failing once.
 */
export async function missingSearchAttributes(
  client: Client,
  namespace: string,
): Promise<string[]> {
  const registered = await registeredSearchAttributes(client, namespace);
  return searchAttributeNames.filter((name) => !registered.includes(name));
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
