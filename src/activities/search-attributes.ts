import type { Client, OperatorService } from '@temporalio/client';
import { searchAttributeKeys } from '../protocol/wire.js';

/** The names of the search attributes ReconcileWorkflow keeps. */
export const searchAttributeNames: string[] = Object.values(searchAttributeKeys).map(
  (attribute) => attribute.name,
);

/** How long an answer is reused: registering takes effect within this, and a thousand reconciles reminded at once cost one call. */
const REGISTRATION_TTL_MS = 10_000;

/**
 * Which of the library's search attributes `namespace` has registered, asked through the operator
 * service. Bounded: a caller (a worker start, an activity) must not hang on a frontend that never
 * answers this one call.
 */
export async function registeredSearchAttributes(
  client: Client,
  namespace: string,
): Promise<string[]> {
  // Typed structurally: ConnectionLike only declares operatorService since SDK 1.15, every connection has it.
  const { operatorService } = client.connection as { operatorService?: OperatorService };
  if (!operatorService) throw new Error('the Client connection has no operator service');
  const { customAttributes } = await client.connection.withDeadline(Date.now() + 10_000, () =>
    operatorService.listSearchAttributes({ namespace }),
  );
  return searchAttributeNames.filter((name) => customAttributes?.[name] !== undefined);
}

/**
 * The client's namespace's registered attributes, asked at most every few seconds per worker and
 * shared by concurrent askers: ReconcileWorkflows opened before registration learn of it from
 * here (an upsert of an unregistered attribute would fail their workflow task in a loop).
 */
export class SearchAttributeRegistration {
  readonly #client: Client;
  #answer: { at: number; names: Promise<string[]> } | undefined;

  constructor(client: Client) {
    this.#client = client;
  }

  /** The registered ones; rejects when the namespace cannot be asked. */
  registered(): Promise<string[]> {
    const now = Date.now();
    if (this.#answer === undefined || now - this.#answer.at >= REGISTRATION_TTL_MS) {
      const names = registeredSearchAttributes(this.#client, this.#client.options.namespace);
      this.#answer = { at: now, names };
      // A failed answer is not kept: the next asker tries again.
      names.catch(() => {
        if (this.#answer?.names === names) this.#answer = undefined;
      });
    }
    return this.#answer.names;
  }

  /** Whether all of them are registered; false when the namespace cannot be asked. */
  async complete(): Promise<boolean> {
    const names = await this.registered().catch(() => []);
    return names.length === searchAttributeNames.length;
  }
}
