import { MigrationConflictError } from '../../core/errors.js';

/** What {@link newerSchema} reads of a schema: these fields of a `MigrationStatus`. */
interface SchemaStanding {
  schema: string;
  /** This version's migrations the schema lacks. */
  pending: readonly string[];
  /** The schema's migrations this version does not know. */
  unknown: readonly string[];
  /** Each of `unknown` declared itself backward-compatible. */
  unknownCompatible: boolean;
}

/**
 * Whether this version runs on a schema a newer sideeffect migrated: `refused` when one of the
 * newer migrations is not declared backward-compatible, or when the schema also lacks one of
 * this version's (it was never migrated by this version, so its statements may find nothing they
 * expect); `accepted`, with the line to log, when each is declared backward-compatible (a rolling
 * deploy, a rollback); undefined when the schema has no newer migration. migrate(), the worker's
 * start check and `sideeffect migrate --status/--dry-run` all ask this one function, so none of
 * them accepts a schema another refuses, and an operator reads the same words from each.
 */
export function newerSchema(
  status: SchemaStanding,
): { refused: MigrationConflictError } | { accepted: string } | undefined {
  const { schema, pending, unknown, unknownCompatible } = status;
  if (unknown.length === 0) return undefined;
  const newer = `schema "${schema}" was migrated by a newer sideeffect (${unknown.join(', ')})`;
  const why = [
    ...(unknownCompatible ? [] : ['not all of them declared backward-compatible']),
    ...(pending.length > 0 ? [`it lacks ${pending.join(', ')} of this version`] : []),
  ];
  if (why.length > 0) {
    return {
      refused: new MigrationConflictError(
        `${newer} that this version cannot run on (${why.join('; ')}): deploy that version of sideeffect here, and run migrate only from it; never roll the schema back by hand`,
      ),
    };
  }
  return {
    accepted: `${newer}, each declared backward-compatible: this version runs on it unchanged; upgrade the package, and run migrate only from the newer version`,
  };
}
