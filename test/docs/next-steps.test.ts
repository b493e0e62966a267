/**
 * What a caller does next is written once per kind in src/core/error-codes.ts (a code without an
 * entry does not compile) and once for people, in docs/troubleshooting.md's "What to do next"
 * table: the two must say the same, row for row, and the errors and failures must read it.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import {
  NEXT_BY_CODE,
  NEXT_BY_FAILURE_TYPE,
  type NextStep,
  nextStep,
} from '../../src/core/error-codes.js';
import {
  ContendedError,
  hasCode,
  NotAppliedError,
  OutcomeUncertainError,
  StoreMisconfiguredError,
} from '../../src/core/errors.js';
import { SideEffectFailureType } from '../../src/protocol/failures.js';
import { NEXT_BY_SYNCX_CODE, SyncxError } from '../../src/syncx/errors.js';
import { REPO_ROOT } from '../support/temporal.js';

const page = readFileSync(path.join(REPO_ROOT, 'docs/troubleshooting.md'), 'utf8');
const section = page.slice(page.indexOf('## What to do next'), page.indexOf('## Setting up'));
const rows = [...section.matchAll(/^\| `([A-Za-z_]+)` \| ([^|]+) \| `([a-z-]+)` \|$/gm)].map(
  (m) => [m[1]!, m[2]!.trim(), m[3]!] as const,
);
const of = (kind: string) =>
  Object.fromEntries(rows.filter(([, k]) => k === kind).map(([name, , next]) => [name, next]));

describe("troubleshooting.md's next-step table", () => {
  it('lists every error code, failure type and syncx code with the next step of the code', () => {
    expect(of('error code')).toEqual(NEXT_BY_CODE);
    expect(of('Temporal failure type')).toEqual(NEXT_BY_FAILURE_TYPE);
    expect(of('`sideeffect/syncx` error code')).toEqual(NEXT_BY_SYNCX_CODE);
    expect(rows).toHaveLength(
      Object.keys(NEXT_BY_CODE).length +
        Object.keys(NEXT_BY_FAILURE_TYPE).length +
        Object.keys(NEXT_BY_SYNCX_CODE).length,
    );
  });

  it('every failure type of the library has its row', () => {
    expect(Object.keys(NEXT_BY_FAILURE_TYPE).sort()).toEqual(
      Object.values(SideEffectFailureType).sort(),
    );
  });
});

describe('errors and failures say what comes next', () => {
  it('an error reads next from its code', () => {
    expect(new ContendedError('k', 'r', 50).next).toBe('retry');
    expect(new OutcomeUncertainError('k', 'r', 'lost').next).toBe('wait-for-person');
    expect(new StoreMisconfiguredError('s', 'no tables').next).toBe('fix-and-retry');
    expect(new NotAppliedError('declined').next).toBe('final');
    const syncx: NextStep = new SyncxError('INVALID_COUNT', 'bad').next;
    expect(syncx).toBe('fix-and-retry');
  });

  it('hasCode narrows to the code it matched', () => {
    const error: unknown = new ContendedError('k', 'r', 50);
    if (!hasCode(error, 'CONTENDED')) throw new Error('not matched');
    const code: 'CONTENDED' = error.code;
    expect([code, error.next]).toEqual(['CONTENDED', 'retry']);
  });

  it('nextStep reads a failure type off the cause chain, and knows nothing else', () => {
    const uncertain = ApplicationFailure.nonRetryable('lost', 'SideEffectOutcomeUncertain');
    expect(nextStep(uncertain)).toBe('wait-for-person');
    // As a workflow catches it: an ActivityFailure whose cause is the ApplicationFailure.
    expect(nextStep({ type: undefined, cause: { cause: uncertain } })).toBe('wait-for-person');
    expect(nextStep(ApplicationFailure.retryable('busy', 'SideEffectContended'))).toBe('retry');
    expect(nextStep(ApplicationFailure.nonRetryable('no', 'CardDeclined'))).toBeUndefined();
    expect(nextStep(new Error('plain'))).toBeUndefined();
    expect(nextStep(undefined)).toBeUndefined();
    expect(nextStep({ type: 'toString' })).toBeUndefined();
  });
});
