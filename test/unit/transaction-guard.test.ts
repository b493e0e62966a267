/**
 * The pure parts of what keeps a transactional effect's work inside the store's transaction: which
 * SQL text ends the transaction (never sent) or checks constraints early (marked), and how a
 * refused misuse reaches Temporal: non-retryable, since the same work would do it again and each
 * attempt could leave what it wrote outside the transaction behind.
 */
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { toFailure } from '../../src/activities/failures.js';
import {
  StoreUnavailableError,
  TransactionEndedError,
  TransactionMisuseError,
} from '../../src/core/errors.js';
import { SideEffectFailureType } from '../../src/protocol/failures.js';
import { endsTransaction, setsConstraints } from '../../src/store/postgres/transaction-guard.js';

describe('statements that end the transaction', () => {
  it.each([
    'commit',
    'COMMIT;',
    '  commit and chain',
    'end',
    'END TRANSACTION',
    'abort',
    'rollback',
    'ROLLBACK WORK',
    'rollback and chain',
    "prepare transaction 'x'",
    'select 1; commit',
    'insert into t values (1); /* done */ rollback',
    '-- a comment\ncommit',
  ])('%j ends it', (text) => {
    expect(endsTransaction(text)).toBe(true);
  });

  it.each([
    'select 1',
    "select 'commit'",
    'select "commit" from t',
    'select $$; commit$$',
    'select $tag$ rollback $tag$',
    "select e'it\\'s; commit'",
    'rollback to savepoint a',
    'ROLLBACK TO a',
    'rollback work to savepoint a',
    'savepoint a; release savepoint a',
    'select case when true then 1 end',
    '-- commit\nselect 1',
    '/* rollback */ select 1',
    'prepare q as select 1',
    'do $$ begin perform 1; end $$',
    'begin',
  ])('%j does not', (text) => {
    expect(endsTransaction(text)).toBe(false);
  });

  it('SET CONSTRAINTS is recognized outside strings and comments only', () => {
    expect(setsConstraints('set constraints all immediate')).toBe(true);
    expect(setsConstraints('insert into t values (1); SET  CONSTRAINTS fk immediate')).toBe(true);
    expect(setsConstraints("select 'set constraints all immediate'")).toBe(false);
    expect(setsConstraints('-- set constraints all immediate\nselect 1')).toBe(false);
  });
});

describe('refused misuse at the activity boundary', () => {
  it('TransactionEndedError and TransactionMisuseError are non-retryable SideEffectTransactionMisuse', () => {
    for (const error of [
      new TransactionEndedError('k'),
      new TransactionMisuseError('k', 'fenced-sink', 'writeFenced inside transactional work'),
    ]) {
      const failure = toFailure(error) as ApplicationFailure;
      expect(failure).toBeInstanceOf(ApplicationFailure);
      expect(failure.type).toBe(SideEffectFailureType.TransactionMisuse);
      expect(failure.nonRetryable).toBe(true);
      expect(failure.details).toEqual([{ key: 'k', code: error.code }]);
    }
    // An outage stays retryable.
    const unavailable = toFailure(new StoreUnavailableError('acquire', new Error('down')));
    expect((unavailable as ApplicationFailure).nonRetryable).toBe(false);
  });
});
