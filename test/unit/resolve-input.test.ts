import { describe, expect, it } from 'vitest';
import { checkResolution } from '../../src/core/validate.js';
import type { Resolution } from '../../src/core/verdict.js';
import {
  fencePlaceholder,
  RESULT_PLACEHOLDER,
  resolveInputError,
} from '../../src/protocol/resolve-input.js';

const cases: unknown[] = [
  { applied: true, reason: 'in the ledger' },
  { applied: false, reason: 'not there', by: 'ann', fence: 3 },
  { applied: true, result: { id: 1 }, reason: 'found' },
  { applied: 'yes', reason: 'x' },
  { applied: true },
  { applied: true, reason: '' },
  { applied: true, reason: '   ' },
  { applied: true, reason: 'ok', by: ' ' },
  { applied: true, reason: 'ok', by: '' },
  { applied: true, reason: 'a\0b' },
  { applied: true, reason: '\ud800' },
  { applied: true, reason: 'x'.repeat(4097) },
  { applied: true, reason: 'ok', by: 'b'.repeat(513) },
  { applied: true, reason: 'ok', fence: 0 },
  { applied: true, reason: 'ok', fence: 1.5 },
  { applied: true, reason: 'ok', fence: '2' },
];

function storeAccepts(input: unknown): boolean {
  const { result: _result, ...verdict } = input as Record<string, unknown>;
  try {
    checkResolution(verdict as unknown as Resolution);
    return true;
  } catch {
    return false;
  }
}

describe('resolveInputError', () => {
  it.each(cases)('accepts %j exactly when the store would', (input) => {
    expect(resolveInputError(input) === undefined).toBe(storeAccepts(input));
  });

  it('refuses what is not one object, and unknown fields (a typo must not pass)', () => {
    for (const input of [null, 'applied', [{ applied: true, reason: 'x' }], 42]) {
      expect(resolveInputError(input)).toMatch(/expected one JSON object/);
    }
    expect(resolveInputError({ aplied: true, applied: false, reason: 'x' })).toMatch(
      /unknown field\(s\) aplied/,
    );
  });

  it('says what is wrong in the store’s words', () => {
    expect(resolveInputError({ applied: true, reason: '  ' })).toBe(
      'invalid reason: must not be blank',
    );
    expect(resolveInputError({ applied: 1, reason: 'x' })).toBe(
      'invalid applied: must be a boolean',
    );
  });

  it('takes "attempt": "any" alone, and refuses any other value or it beside a fence', () => {
    expect(resolveInputError({ applied: false, reason: 'x', attempt: 'any' })).toBeUndefined();
    expect(resolveInputError({ applied: false, reason: 'x', attempt: 2 })).toMatch(
      /^attempt must be "any"/,
    );
    expect(resolveInputError({ applied: false, reason: 'x', attempt: 'latest' })).toMatch(
      /^attempt must be "any"/,
    );
    expect(resolveInputError({ applied: false, reason: 'x', attempt: 'any', fence: 2 })).toBe(
      'give "fence" (the attempt you checked) or "attempt": "any", not both',
    );
  });

  it("refuses the template's fence placeholder, naming it", () => {
    const placeholder = fencePlaceholder(2);
    expect(placeholder).toBe('<the attempt you checked: 2 is the latest>');
    expect(
      resolveInputError({
        applied: true,
        result: RESULT_PLACEHOLDER,
        reason: 'x',
        fence: placeholder,
      }),
    ).toMatch(
      /^fence is still the template's placeholder "<the attempt you checked: 2 is the latest>"/,
    );
  });
});
