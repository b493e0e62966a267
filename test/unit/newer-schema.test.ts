/**
 * One decision and one wording for a schema a newer sideeffect migrated, whichever of migrate(),
 * the worker's start check or `sideeffect migrate --status/--dry-run` asks.
 */
import { describe, expect, it } from 'vitest';
import { MigrationConflictError } from '../../src/core/errors.js';
import { newerSchema } from '../../src/store/postgres/newer-schema.js';

const standing = { schema: 's', pending: [] as string[], unknown: ['0099_next.sql'] };

describe('newerSchema', () => {
  it('says nothing of a schema with no newer migration', () => {
    expect(newerSchema({ ...standing, unknown: [], unknownCompatible: true })).toBeUndefined();
    expect(
      newerSchema({ ...standing, unknown: [], unknownCompatible: true, pending: ['0002_a.sql'] }),
    ).toBeUndefined();
  });

  it('accepts newer migrations each declared backward-compatible, with the line to log', () => {
    expect(newerSchema({ ...standing, unknownCompatible: true })).toEqual({
      accepted: expect.stringMatching(
        /^schema "s" was migrated by a newer sideeffect \(0099_next\.sql\), each declared backward-compatible/,
      ),
    });
  });

  it('refuses one not declared so, or a schema that also lacks a migration of this version', () => {
    for (const [status, why] of [
      [
        { ...standing, unknownCompatible: false },
        /\(not all of them declared backward-compatible\)/,
      ],
      [
        { ...standing, unknownCompatible: true, pending: ['0014_x.sql'] },
        /\(it lacks 0014_x\.sql of this version\)/,
      ],
      [
        { ...standing, unknownCompatible: false, pending: ['0014_x.sql'] },
        /\(not all of them declared backward-compatible; it lacks 0014_x\.sql of this version\)/,
      ],
    ] as const) {
      const verdict = newerSchema(status);
      const refused = verdict && 'refused' in verdict ? verdict.refused : undefined;
      expect(refused).toBeInstanceOf(MigrationConflictError);
      expect(refused?.code).toBe('MIGRATION_CONFLICT');
      expect(refused?.message).toMatch(why);
      expect(refused?.message).toMatch(/deploy that version of sideeffect here/);
    }
  });
});
