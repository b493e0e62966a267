/**
 * Which Postgres answers are a mistake to fix rather than an outage, and what the error says. The
 * wrong password (28P01) is here because the test server trusts 127.0.0.1 and never asks for one;
 * the other refusals run against the real server in test/worker/misconfiguration.test.ts and
 * test/cli/cli-connection.test.ts.
 */
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { StoreMisconfiguredError, StoreUnavailableError } from '../../src/core/errors.js';
import { connectionRefusal } from '../../src/store/postgres/connection.js';

const pool = new pg.Pool({ connectionString: 'postgres://app:s3cret-pw@db.example:6543/shop' });
afterAll(() => pool.end());

function pgError(code: string, message: string): pg.DatabaseError {
  const error = new pg.DatabaseError(message, message.length, 'error');
  error.code = code;
  return error;
}

describe('connectionRefusal', () => {
  it('a wrong password (28P01), as the store wraps it: misconfiguration naming host, database and user', () => {
    const cause = pgError('28P01', 'password authentication failed for user "app"');
    const refused = connectionRefusal(pool, new StoreUnavailableError('list', cause), 'billing');
    expect(refused).toBeInstanceOf(StoreMisconfiguredError);
    expect(refused).toMatchObject({ code: 'STORE_MISCONFIGURED', schema: 'billing' });
    expect(refused?.message).toBe(
      'Postgres at db.example:6543, database "shop", user "app": refused, password authentication failed for user "app" (SQLSTATE 28P01): check the password (DATABASE_URL, PGPASSWORD or --connection; a secret store may hold an old one)',
    );
    expect(refused?.message).not.toContain('s3cret-pw');
  });

  it.each([
    ['28000', 'role "app" does not exist'],
    ['3D000', 'database "shop" does not exist'],
    ['42501', 'permission denied for schema billing'],
  ])('%s is misconfiguration too', (code, message) => {
    expect(connectionRefusal(pool, pgError(code, message))?.message).toContain(
      `${message} (SQLSTATE ${code})`,
    );
  });

  it.each([
    ['the server down', Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })],
    ['a timeout', new Error('timeout exceeded when trying to connect')],
    ['an administrator shutdown', pgError('57P01', 'terminating connection')],
    ['too many connections', pgError('53300', 'sorry, too many clients already')],
  ])('%s is not: the caller retries', (_, error) => {
    expect(connectionRefusal(pool, new StoreUnavailableError('list', error))).toBeUndefined();
  });
});
