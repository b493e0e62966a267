import { describe, expect, it } from 'vitest';
import { defineEffect } from '../../src/activities/index.js';
import { InvalidActionError } from '../../src/core/errors.js';

const apply = async () => 'ok';
const resource = () => 'r';

describe('defineEffect: the breaker group', () => {
  it('refuses an empty group and one over the store limit (256 UTF-8 bytes), naming breaker.group', () => {
    for (const group of ['', 'x'.repeat(257), 'é'.repeat(129)]) {
      const refusal = (() => {
        try {
          defineEffect({ resource, apply, breaker: { group } });
        } catch (error) {
          return error;
        }
      })();
      expect(refusal, `${group.length} chars`).toBeInstanceOf(InvalidActionError);
      expect(refusal).toMatchObject({ code: 'INVALID_ACTION', field: 'breaker.group' });
    }
  });

  it('takes a group at the limit, and none (the effect name at worker start)', () => {
    expect(defineEffect({ resource, apply, breaker: { group: 'x'.repeat(256) } })).toBeDefined();
    expect(defineEffect({ resource, apply, breaker: { group: undefined } })).toBeDefined();
    expect(defineEffect({ resource, apply, breaker: true })).toBeDefined();
  });
});
