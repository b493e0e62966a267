import { describe, expect, it } from 'vitest';
import { parseInvocation } from '../../src/cli/args.js';
import { UsageError } from '../../src/cli/usage.js';

/** What a command line parses to: help, version, or the command's name beside its checked params. */
function parseCommand(argv: string[], user = 'cli') {
  const parsed = parseInvocation(argv, user);
  if (parsed.kind === 'help') return { name: 'help', topic: parsed.topic ?? 'main' };
  if (parsed.kind === 'version') return { name: 'version' };
  return { name: parsed.command.name, ...(parsed.params as object) };
}

/** The global options of a command line, and its command as {@link parseCommand} reads it. */
function invocation(argv: string[]) {
  const parsed = parseInvocation(argv);
  if (parsed.kind !== 'command') throw new Error(`${argv.join(' ')} names no command`);
  return { command: parseCommand(argv), options: parsed.options };
}

describe('sideeffect command line', () => {
  it('parses each command', () => {
    expect(parseCommand(['migrate'])).toEqual({ name: 'migrate', mode: 'apply' });
    expect(parseCommand(['migrate', '--print-grants', 'app', '--kind', 'runtime'])).toEqual({
      name: 'migrate',
      mode: 'print-grants',
      role: 'app',
      kind: 'runtime',
    });
    expect(parseCommand(['list', '--state', 'uncertain', '--limit', '5', '--json'])).toEqual({
      name: 'list',
      state: 'uncertain',
      limit: 5,
    });
    expect(parseCommand(['show', 'wf-1/charge'])).toEqual({
      name: 'show',
      key: 'wf-1/charge',
      afterId: 0,
    });
    expect(
      parseCommand(
        [
          'resolve',
          'k',
          '--applied',
          '--reason',
          ' seen in bank ',
          '--result',
          '{"id":"ch_1"}',
          '--fence',
          '3',
        ],
        'cli:ann',
      ),
    ).toEqual({
      name: 'resolve',
      form: 'key',
      key: 'k',
      applied: true,
      reason: 'seen in bank',
      result: { id: 'ch_1' },
      by: 'cli:ann',
      attempt: { fence: 3 },
      waitMs: 30_000,
    });
    expect(
      parseCommand([
        'resolve',
        'k',
        '--not-applied',
        '--reason',
        'absent',
        '--by',
        'bob',
        '--wait',
        '2m',
        '--any-attempt',
      ]),
    ).toMatchObject({
      applied: false,
      result: null,
      by: 'bob',
      attempt: 'any',
      waitMs: 120_000,
    });
    expect(parseCommand(['purge', '--older-than', '30d'])).toEqual({
      name: 'purge',
      olderThanMs: 30 * 86_400_000,
      force: false,
      yes: false,
    });
    expect(parseCommand(['purge', '--older-than', '1h', '--force', '-y'])).toMatchObject({
      olderThanMs: 3_600_000,
      force: true,
      yes: true,
    });
  });

  it('parses resolve of many keys (--resource, --from-file) and stats', () => {
    expect(
      parseCommand(
        [
          'resolve',
          '--resource',
          'card:7',
          '--older-than',
          '10m',
          '--not-applied',
          '--reason',
          'outage',
          '--dry-run',
          '--any-attempt',
        ],
        'cli:ann',
      ),
    ).toEqual({
      name: 'resolve',
      form: 'by-resource',
      dryRun: true,
      by: 'cli:ann',
      selection: { resource: 'card:7', olderThanMs: 600_000 },
      applied: false,
      reason: 'outage',
    });
    expect(parseCommand(['resolve', '--from-file', 'v.jsonl', '--by', 'ann', '--json'])).toEqual({
      name: 'resolve',
      form: 'from-file',
      dryRun: false,
      by: 'ann',
      file: 'v.jsonl',
      anyAttempt: false,
    });
    expect(parseCommand(['resolve', '--from-file', 'v.jsonl', '--any-attempt'])).toMatchObject({
      form: 'from-file',
      file: 'v.jsonl',
      anyAttempt: true,
    });
    expect(
      parseCommand([
        'resolve',
        'k',
        '--not-applied',
        '--reason',
        'x',
        '--fence',
        '1',
        '--data-converter',
        'dc.js',
      ]),
    ).toMatchObject({ name: 'resolve', key: 'k', dataConverter: 'dc.js' });
    expect(
      parseCommand(['resolve', '--from-file', 'v.jsonl', '--data-converter', 'dc.js']),
    ).toMatchObject({ name: 'resolve', form: 'from-file', dataConverter: 'dc.js' });
    expect(parseCommand(['stats', '--json'])).toEqual({ name: 'stats' });
  });

  it('parses codec-server: the dev server UI allowed by default, origins normalized', () => {
    expect(parseCommand(['codec-server', '--data-converter', 'dc.js'])).toEqual({
      name: 'codec-server',
      dataConverter: 'dc.js',
      host: '127.0.0.1',
      port: 8888,
      corsOrigins: ['http://localhost:8233', 'http://127.0.0.1:8233'],
      insecureNoAuth: false,
    });
    expect(
      parseCommand([
        'codec-server',
        '--port',
        '0',
        '--host',
        '0.0.0.0',
        '--cors-origin',
        'https://cloud.temporal.io/',
        '--cors-origin',
        'HTTP://UI.example:8080',
      ]),
    ).toEqual({
      name: 'codec-server',
      host: '0.0.0.0',
      port: 0,
      corsOrigins: ['https://cloud.temporal.io', 'http://ui.example:8080'],
      insecureNoAuth: false,
    });
    expect(
      parseCommand([
        'codec-server',
        '--token-file',
        'codec.token',
        '--max-concurrent',
        '4',
        '--max-inflight-mb',
        '8',
      ]),
    ).toMatchObject({
      tokenFile: 'codec.token',
      insecureNoAuth: false,
      maxConcurrent: 4,
      maxInFlightBytes: 8 * 1024 * 1024,
    });
    for (const host of ['127.0.0.1', '127.8.0.1', '::1', 'localhost'])
      expect(
        parseCommand(['codec-server', '--insecure-no-auth', '--host', host]),
        host,
      ).toMatchObject({ host, insecureNoAuth: true });
  });

  it('reads durations as the library does: 1h30m, "2 days", 45s', () => {
    for (const [text, ms] of [
      ['1h30m', 5_400_000],
      ['2 days', 172_800_000],
      ['1 hour', 3_600_000],
      ['45s', 45_000],
      ['1d 12h', 129_600_000],
    ] as const) {
      expect(parseCommand(['purge', '--older-than', text]), text).toMatchObject({
        olderThanMs: ms,
      });
    }
  });

  it('takes the global options on every command, as the temporal CLI names them', () => {
    expect(
      invocation([
        'list',
        '--connection',
        'postgres://a@h/db',
        '--schema',
        'billing',
        '--address',
        'tmprl:7233',
        '--namespace',
        'prod',
        '--profile',
        'cloud',
        '-o',
        'jsonl',
      ]),
    ).toEqual({
      command: { name: 'list', limit: 50 },
      options: {
        output: 'jsonl',
        connection: 'postgres://a@h/db',
        schema: 'billing',
        address: 'tmprl:7233',
        namespace: 'prod',
        profile: 'cloud',
      },
    });
    expect(invocation(['stats', '--json']).options).toEqual({ output: 'json' });
    expect(invocation(['stats', '--output=json']).options).toEqual({ output: 'json' });
    expect(invocation(['stats']).options).toEqual({ output: 'text' });
    expect(parseCommand(['migrate', '--status'])).toEqual({ name: 'migrate', mode: 'status' });
    expect(parseCommand(['migrate', '--dry-run'])).toEqual({ name: 'migrate', mode: 'dry-run' });
  });

  it('answers --help everywhere, and help <command> with that command', () => {
    expect(parseCommand([])).toEqual({ name: 'help', topic: 'main' });
    expect(parseCommand(['--help'])).toEqual({ name: 'help', topic: 'main' });
    expect(parseCommand(['help'])).toEqual({ name: 'help', topic: 'main' });
    for (const name of ['migrate', 'list', 'show', 'resolve', 'stats', 'purge', 'codec-server']) {
      expect(parseCommand([name, '--help'])).toEqual({ name: 'help', topic: name });
      expect(parseCommand([name, '-h'])).toEqual({ name: 'help', topic: name });
      expect(parseCommand(['help', name])).toEqual({ name: 'help', topic: name });
      expect(parseCommand(['-n', 'prod', name, 'k', '--help'])).toEqual({
        name: 'help',
        topic: name,
      });
    }
  });

  it("takes temporal's short flags and global options anywhere, before the command too", () => {
    const expected = {
      command: { name: 'list', limit: 50 },
      options: { output: 'json', namespace: 'prod', schema: 'billing' },
    };
    expect(invocation(['-n', 'prod', '--schema=billing', 'list', '-o', 'json'])).toEqual(expected);
    expect(invocation(['-o', 'json', 'list', '-n', 'prod', '--schema', 'billing'])).toEqual(
      expected,
    );
    expect(invocation(['--namespace=prod', '-ojson', '--schema', 'billing', 'list'])).toEqual(
      expected,
    );
    expect(
      invocation([
        '-n',
        'prod',
        'resolve',
        'k',
        '--not-applied',
        '--reason',
        'gone',
        '--fence',
        '1',
      ]),
    ).toMatchObject({ command: { name: 'resolve', key: 'k' }, options: { namespace: 'prod' } });
    // `--` ends the options: a key that starts with a dash.
    expect(parseCommand(['show', '--', '-odd-key'])).toMatchObject({ key: '-odd-key' });
    expect(parseCommand(['--version'])).toEqual({ name: 'version' });
    expect(parseCommand(['-v'])).toEqual({ name: 'version' });
  });

  // What was tried, and the message a person gets back.
  const bad: Array<[string[], RegExp]> = [
    [['frobnicate'], /unknown command "frobnicate"/],
    [['list', '--state', 'weird'], /--state must be one of/],
    [['list', '--limit', '0'], /--limit must be a positive integer/],
    [['list', '--limit', 'ten'], /--limit must be a positive integer/],
    [['list', '--limit', '-1'], /--limit must be a positive integer/],
    [['purge', '--older-than', '-3d'], /--older-than must be a duration like/],
    [['list', 'extra'], /unexpected argument "extra"/],
    [['show'], /expected exactly one key/],
    [['show', 'a', 'b'], /expected exactly one key/],
    [['show', 'a', '--reason', 'x'], /show does not take --reason/],
    [['resolve', 'k', '--reason', 'x'], /exactly one of --applied or --not-applied/],
    [['resolve', 'k', '--applied', '--not-applied', '--reason', 'x'], /exactly one of/],
    [['resolve', 'k', '--applied'], /--reason is required/],
    [['resolve', 'k', '--applied', '--reason', '   '], /--reason is required/],
    [['resolve', 'k', '--applied', '--reason', 'x'], /--applied needs --result JSON/],
    [
      ['resolve', 'k', '--not-applied', '--reason', 'x', '--wait', 'forever'],
      /--wait must be a duration like/,
    ],
    [
      ['resolve', '--resource', 'r', '--not-applied', '--reason', 'x', '--wait', '5s'],
      /--wait goes with a single key/,
    ],
    [
      ['resolve', 'k', '--applied', '--reason', 'x', '--result', '{oops'],
      /--result is not valid JSON/,
    ],
    [
      ['resolve', 'k', '--not-applied', '--reason', 'x', '--result', '1'],
      /--result only goes with --applied/,
    ],
    [['resolve', 'k', '--applied', '--reason', 'x', '--colour'], /^unknown option --colour$/],
    [['resolve', 'k', '--fenec', '3'], /^unknown option --fenec; did you mean --fence\?$/],
    [
      ['resolve', 'k', '--not-aplied'],
      /^unknown option --not-aplied; did you mean --not-applied\?$/,
    ],
    [['--nmespace', 'prod', 'list'], /^unknown option --nmespace; did you mean --namespace\?$/],
    [['list', '--dry'], /^unknown option --dry$/],
    [['resolve', 'k', '--dry'], /^unknown option --dry; did you mean --dry-run\?$/],
    [['list', '-x'], /^unknown option -x$/],
    [['lst'], /^unknown command "lst"; did you mean list\?$/],
    [['help', 'reslove'], /^unknown command "reslove"; did you mean resolve\?$/],
    [['resolve', 'k', '--not-applied', '--reason'], /^--reason needs a value$/],
    [['resolve', 'k', '--reason', '--not-applied'], /^--reason needs a value$/],
    [['list', '--json=yes'], /^--json takes no value$/],
    [['list', '-n'], /^-n needs a value$/],
    [['-o', 'json'], /--output needs a command/],
    [
      ['codec-server', '--insecure-no-auth', '--host', '0.0.0.0'],
      /--insecure-no-auth only goes with a loopback --host/,
    ],
    [
      ['codec-server', '--insecure-no-auth', '--token-file', 't'],
      /--token-file or --insecure-no-auth, not both/,
    ],
    [['codec-server', '--max-concurrent', '0'], /--max-concurrent must be a positive integer/],
    [['codec-server', '--max-inflight-mb', 'lots'], /--max-inflight-mb must be a positive integer/],
    [['purge'], /--older-than must be a duration like/],
    [['resolve', '--resource', 'r', '--from-file', 'f'], /--resource or --from-file, not both/],
    [['resolve', '--resource', 'r', '--reason', 'x'], /exactly one of --applied or --not-applied/],
    [
      ['resolve', '--resource', 'r', '--applied', '--reason', 'x', '--result', '{}'],
      /per-key results in --from-file/,
    ],
    [
      ['resolve', '--resource', 'r', '--applied', '--reason', 'x', '--fence', '3'],
      /--fence does not go with --resource/,
    ],
    [
      ['resolve', '--resource', 'r', '--applied', '--reason', 'x', '--newer-than', '5x'],
      /--newer-than must be a duration like/,
    ],
    [['resolve', '--resource', 'r', 'k', '--applied', '--reason', 'x'], /unexpected argument "k"/],
    [['resolve', '--from-file', 'f', '--applied'], /--applied does not go with --from-file/],
    // Which attempt was checked: required, and shown how to find it.
    [['resolve', 'k', '--not-applied', '--reason', 'x'], /--fence N is required/],
    [['resolve', 'k', '--not-applied', '--reason', 'x'], /sideeffect show k\n/],
    [
      ['resolve', 'k', '--applied', '--result', '{"id":1}', '--reason', 'in the bank'],
      /sideeffect resolve k --applied --result '\{"id":1\}' --reason 'in the bank' --fence N/,
    ],
    [['resolve', 'k', '--not-applied', '--reason', 'x', '--fence', '0'], /positive integer/],
    [
      ['resolve', 'k', '--not-applied', '--reason', 'x', '--fence', '2', '--any-attempt'],
      /--fence N or --any-attempt, not both/,
    ],
    [
      ['resolve', '--resource', 'r', '--not-applied', '--reason', 'x'],
      /--resource needs --any-attempt/,
    ],
    [
      ['resolve', 'k', '--applied', '--reason', 'x', '--dry-run'],
      /--dry-run goes with --resource or --from-file/,
    ],
    [['stats', 'x'], /unexpected argument "x"/],
    [['purge', '--older-than', '30'], /--older-than must be a duration like/],
    [['purge', '--older-than', '1h30'], /--older-than must be a duration like/],
    [['migrate', '--status', '--dry-run'], /give one of --status, --dry-run/],
    [['list', '-o', 'yaml'], /-o\/--output must be one of text, json, jsonl/],
    [['list', '--json', '-o', 'text'], /--json is -o json/],
    [['list', '--schema', ''], /--schema needs a value/],
    [['purge', '--older-than', '0d'], /more than zero/],
    [['codec-server', '--port', '65536'], /--port must be a port number/],
    [['codec-server', '--port', '-1'], /--port must be a port number/],
    [['codec-server', '--port', '88a'], /--port must be a port number/],
    [['codec-server', '--data-converter', ''], /--data-converter needs a module path/],
    [['codec-server', '--cors-origin', '*'], /--cors-origin must be the UI's origin/],
    [['codec-server', '--cors-origin', 'localhost:8233'], /--cors-origin must be the UI's origin/],
    [
      ['codec-server', '--cors-origin', 'http://localhost:8233/namespaces'],
      /--cors-origin must be the UI's origin/,
    ],
    [['codec-server', 'extra'], /unexpected argument "extra"/],
    [['codec-server', '--reason', 'x'], /codec-server does not take --reason/],
  ];
  it.each(bad)('refuses %j', (argv, message) => {
    let thrown: unknown;
    try {
      parseCommand(argv);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(UsageError);
    expect((thrown as UsageError).message).toMatch(message);
    expect((thrown as UsageError).help).toMatch(/^Usage: sideeffect/m);
  });
});
