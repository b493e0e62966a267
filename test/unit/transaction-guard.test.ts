/**
 * The pure parts of what keeps a transactional effect's work inside the store's transaction: which
 * SQL text ends the transaction (never sent), read as Postgres's lexer reads it, and how a
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
import { endsTransaction } from '../../src/store/postgres/transaction-guard.js';

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

  it.each([
    // Postgres allows `$` inside an identifier: `x$a$` opens no dollar quote (issue 39).
    'select 1 as x$a$; rollback; select 1 as y$a$',
    // With standard_conforming_strings off a backslash escapes in a plain string.
    "set standard_conforming_strings = off; select 'a\\''; rollback; select 'x'",
    // Block comments nest.
    '/* a /* b */ ; */ rollback',
    'select 1 /* /* */ */; commit',
  ])('%j ends it, however it is quoted', (text) => {
    expect(endsTransaction(text)).toBe(true);
  });

  it.each([
    'select $a$ ; rollback ; $a$',
    'select 1 as x$a$',
    'select $1::text',
    '/* a /* ; rollback */ still a comment */ select 1',
  ])('%j does not, read as Postgres reads it', (text) => {
    expect(endsTransaction(text)).toBe(false);
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
