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
    ["host=db password='se cret' dbname=x", 'host=db password=*** dbname=x'],
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

  it('leaves text without a password as it is', () => {
    for (const text of [
      'postgres://postgres@127.0.0.1:5432/test',
      'Temporal at 127.0.0.1:7233 does not answer',
      'key order-42/charge at 12:30',
      'postgres://db:5432/app',
      'a Basic explanation of the fencing token',
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
