import { describe, expect, it } from 'vitest';
import { maskConnectionString, maskError } from '../../src/core/mask.js';

describe('maskConnectionString', () => {
  it.each([
    ['postgres://u:secretpw@db:5432/app', 'postgres://u:***@db:5432/app'],
    [
      'postgresql://app:p%40ss@db/app?sslmode=require',
      'postgresql://app:***@db/app?sslmode=require',
    ],
    ['at postgres://u:secretpw@h/d (refused)', 'at postgres://u:***@h/d (refused)'],
    ["got 'u:secretpw@127.0.0.1:7233'", "got 'u:***@127.0.0.1:7233'"],
    ['http://u:secretpw@127.0.0.1:1', 'http://u:***@127.0.0.1:1'],
    ['host=db user=app password=secretpw dbname=x', 'host=db user=app password=*** dbname=x'],
    ["host=db password='se cret' dbname=x", "host=db password='***' dbname=x"],
    ['postgres://db/app?user=u&password=secretpw', 'postgres://db/app?user=u&password=***'],
    [
      'two: postgres://a:x1@h/d and mysql://b:x2@h/d',
      'two: postgres://a:***@h/d and mysql://b:***@h/d',
    ],
    ['retry with api_key=tok_123 later', 'retry with api_key=*** later'],
    ['token=abc&x=1', 'token=***&x=1'],
    ['{"password": "hunter2", "user": "u"}', '{"password": "***", "user": "u"}'],
    ['Authorization: Basic dXNlcjpwYXNz', 'Authorization: ***'],
    ['sent Bearer eyJhbGciOiJIUzI1NiJ9.e30.x', 'sent Bearer ***'],
  ])('%s', (input, masked) => {
    expect(maskConnectionString(input)).toBe(masked);
  });

  // Issue 31: the shapes a store review found stored in clear, and the other usual ones. Each
  // secret is `s3cr3t...` so the check below can say none of it is left.
  it.each([
    // environment assignments, any prefix (a failed child process echoes its command line)
    ['Command failed: PGPASSWORD=s3cr3tA psql -h db', 'Command failed: PGPASSWORD=*** psql -h db'],
    ['DB_PASSWORD=s3cr3tB node app.js', 'DB_PASSWORD=*** node app.js'],
    [
      'env AWS_SECRET_ACCESS_KEY=s3cr3tC/x+y AWS_REGION=eu-west-1',
      'env AWS_SECRET_ACCESS_KEY=*** AWS_REGION=eu-west-1',
    ],
    ['GITHUB_TOKEN=s3cr3tD make', 'GITHUB_TOKEN=*** make'],
    ['APP_SECRET="s3cr3t E" x', 'APP_SECRET="***" x'],
    ['STRIPE_KEY=s3cr3tF', 'STRIPE_KEY=***'],
    // an inspected object (util.inspect), JSON, logfmt, YAML
    ["{ user: 'app', password: 's3cr3tG' }", "{ user: 'app', password: '***' }"],
    ['{"db":{"password":"s3cr3tH"}}', '{"db":{"password":"***"}}'],
    ['level=error user=app password="s3cr3t I" msg=x', 'level=error user=app password="***" msg=x'],
    [
      'db:\n  user: app\n  password: s3cr3tJ\n  host: db',
      'db:\n  user: app\n  password: ***\n  host: db',
    ],
    ['client_secret: s3cr3tK', 'client_secret: ***'],
    // headers
    ['x-api-key: s3cr3tL', 'x-api-key: ***'],
    ['headers: { "X-Auth-Token": "s3cr3tM" }', 'headers: { "X-Auth-Token": "***" }'],
    ['authorization: Bearer s3cr3tN.abc', 'authorization: ***'],
    ['Cookie: session=s3cr3tO', 'Cookie: ***'],
    // URL passwords with any characters
    ['postgres://app:s3cr3t"P@db:5432/x', 'postgres://app:***@db:5432/x'],
    ['postgres://app:s3cr3t@Q@db/x failed', 'postgres://app:***@db/x failed'],
    ['at mysql://u:s3cr3t:R@h', 'at mysql://u:***@h'],
    // tokens by their format
    ['sent eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzM2NyM3RTIn0.s3cr3tS-sig_x', 'sent ***'],
    [
      'https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2026-01-01&sig=s3cr3tT%2Fx%3D&sp=r',
      'https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2026-01-01&sig=***&sp=r',
    ],
    ['key AKIAS3CR3TUUUUUUUUUU used', 'key *** used'],
    ['token ghp_s3cr3tVVVVVVVVVVVVVVVVVVVVVVVVVVVVVV', 'token ***'],
    [
      'got -----BEGIN RSA PRIVATE KEY-----\nMIIs3cr3tW\n-----END RSA PRIVATE KEY----- back',
      'got -----BEGIN RSA PRIVATE KEY----- *** -----END RSA PRIVATE KEY----- back',
    ],
  ])('masks %j', (input, masked) => {
    const out = maskConnectionString(input);
    expect(out).toBe(masked);
    expect(out).not.toMatch(/s3cr3t/i);
    // Masking is idempotent: a masked reason read back and masked again stays as it is.
    expect(maskConnectionString(out)).toBe(out);
  });

  it('leaves text without a password as it is', () => {
    for (const text of [
      'postgres://postgres@127.0.0.1:5432/test',
      'Temporal at 127.0.0.1:7233 does not answer',
      'key order-42/charge at 12:30',
      'postgres://db:5432/app',
      'a Basic explanation of the fencing token',
      // A Temporal identity names a user on a host: no password in it (issue 31).
      'verdict from temporal-cli:root@vm',
      'temporal-cli:root@vm',
      'identity 4242@worker-3 at 127.0.0.1:7233',
      'mail ops@example.com about key=order-42',
      'idempotency_key=order-42 resource=card',
      'the token was not accepted; passwords are never logged',
    ]) {
      expect(maskConnectionString(text)).toBe(text);
    }
  });

  it('maskError masks message and stack in place and keeps the class and fields', () => {
    const error = Object.assign(new TypeError('bad address postgres://u:secretpw@h/d'), {
      code: 'X',
    });
    expect(maskError(error)).toBe(error);
    expect(error).toBeInstanceOf(TypeError);
    expect(error.code).toBe('X');
    expect(error.message).toBe('bad address postgres://u:***@h/d');
    expect(error.stack).not.toContain('secretpw');
  });
});
