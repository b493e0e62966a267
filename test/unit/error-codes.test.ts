/**
 * One word for one state, one code for one error: the two codes of 0.1 that differed only in word
 * order are now OUTCOME_UNCERTAIN and UNEXPECTED_STORE_ANSWER; since 0.3.0 `hasCode` matches only
 * the current code, never the other error's nor a 0.1 spelling.
 */
import { describe, expect, it } from 'vitest';
import {
  ActivityNameClashError,
  hasCode,
  NotAppliedError,
  OutcomeUncertainError,
  UnexpectedStoreAnswerError,
} from '../../src/core/errors.js';

describe('error codes', () => {
  const uncertain = new OutcomeUncertainError('k', 'r', 'lost response');
  const unexpected = new UnexpectedStoreAnswerError('maybe');

  it('an uncertain outcome is called uncertain in its code and message', () => {
    expect(uncertain.code).toBe('OUTCOME_UNCERTAIN');
    expect(uncertain.message).toContain('is uncertain');
    expect(unexpected.code).toBe('UNEXPECTED_STORE_ANSWER');
  });

  it('hasCode matches the current code, not the other error’s nor a 0.1 spelling', () => {
    expect(hasCode(uncertain, 'OUTCOME_UNCERTAIN')).toBe(true);
    expect(hasCode(uncertain, 'UNEXPECTED_STORE_ANSWER')).toBe(false);
    expect(hasCode(unexpected, 'UNEXPECTED_STORE_ANSWER')).toBe(true);
    expect(hasCode(unexpected, 'OUTCOME_UNCERTAIN')).toBe(false);
    // @ts-expect-error 0.1's spelling, removed in 0.3.0
    expect(hasCode(uncertain, 'OUTCOME_UNKNOWN')).toBe(false);
    // @ts-expect-error 0.1's spelling, removed in 0.3.0
    expect(hasCode(unexpected, 'UNKNOWN_OUTCOME')).toBe(false);
    expect(hasCode(new NotAppliedError('declined'), 'NOT_APPLIED')).toBe(true);
    expect(hasCode(new Error('plain'), 'OUTCOME_UNCERTAIN')).toBe(false);
    expect(hasCode({ code: 'OUTCOME_UNCERTAIN' }, 'OUTCOME_UNCERTAIN')).toBe(false);
  });
});

describe('ACTIVITY_NAME_CLASH', () => {
  it('tells to rename the effect for an effect name, your activity for a library name', () => {
    const effect = new ActivityNameClashError(['chargeCard']);
    expect(effect.message).toMatch(
      /rename the effect "chargeCard" \(its key in the plugin's effects/,
    );
    expect(effect.message).not.toMatch(/rename yours/);
    const library = new ActivityNameClashError(['sideeffect.resolveKey']);
    expect(library.message).toMatch(
      /rename your activity "sideeffect.resolveKey": sideeffect\.\* names are the library's/,
    );
    expect(library.message).not.toMatch(/rename the effect/);
    const legacy = new ActivityNameClashError(['inspectKey', 'probe:charge']);
    expect(legacy.message).toMatch(/legacyActivityNames: false/);
    expect(legacy.message).not.toMatch(/rename the effect/);
  });
});
