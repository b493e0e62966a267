/**
 * `sideeffect resolve` where no ReconcileWorkflow waits (`--store-only` for keys no worker serves,
 * else pending for a worker's check), its
 * refusals (not uncertain, an earlier attempt's fence), --dry-run, --from-file, every JSON error's
 * code, and a Temporal that does not answer. Shared setup: fixture.ts.
 */
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cliFixture } from './fixture.js';

const fx = cliFixture('cli_resolve');
const { cli, uncertainKey } = fx;
const unreachable = 'postgres://postgres@127.0.0.1:1/none';

describe('sideeffect resolve through the store', () => {
  it('resolve --store-only decides in the store; the second verdict is told it lost', async () => {
    const { key } = await uncertainKey();
    const first = await cli([
      'resolve',
      '--any-attempt',
      key,
      '--store-only',
      '--applied',
      '--reason',
      'seen in the bank',
      '--result',
      '{"id":"ch_9"}',
      '--by',
      'ann',
    ]);
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/resolved: applied/);
    const record = await fx.store.inspect(key);
    expect(record?.state).toBe('done');
    expect(JSON.parse(new TextDecoder().decode(record!.result!.payload))).toEqual({ id: 'ch_9' });

    const second = await cli([
      'resolve',
      '--any-attempt',
      key,
      '--store-only',
      '--not-applied',
      '--reason',
      'not in the bank',
      '--json',
    ]);
    expect(second.code).toBe(1);
    expect(JSON.parse(second.stdout)).toMatchObject({
      won: false,
      applied: true,
      result: { id: 'ch_9' },
    });
    expect((await fx.store.inspect(key))?.state).toBe('done');
  });

  it('resolve of a key that is not uncertain is refused and changes nothing', async () => {
    const free = { key: 'order-free/charge', resource: 'card-free' };
    const lease = await fx.store.acquire(free, 30_000);
    if (lease.outcome === 'granted') await fx.store.release(free, lease.lease);
    const refused = await cli([
      'resolve',
      '--any-attempt',
      free.key,
      '--not-applied',
      '--reason',
      'x',
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/not uncertain \(state: free\)/);
    const unknown = await cli([
      'resolve',
      '--any-attempt',
      'never-seen',
      '--not-applied',
      '--reason',
      'x',
    ]);
    expect(unknown.code).toBe(1);
    expect((await fx.store.inspect(free.key))?.state).toBe('free');
  });

  it('resolve --fence of an earlier attempt is refused (exit 1) and the key stays uncertain', async () => {
    const action = await uncertainKey();
    const attempt = (await fx.store.inspect(action.key))!.fence;
    expect(
      (
        await cli([
          'resolve',
          action.key,
          '--store-only',
          '--not-applied',
          '--reason',
          'B checked',
          '--fence',
          String(attempt),
        ])
      ).code,
    ).toBe(0);
    // Re-applied, its response lost again: attempt 2.
    const again = await fx.runner.execute(action, async () => {
      throw new Error('gateway timeout again');
    });
    expect(again.outcome).toBe('uncertain');
    const late = await cli([
      'resolve',
      action.key,
      '--store-only',
      '--not-applied',
      '--reason',
      'A checked attempt 1',
      '--fence',
      String(attempt),
      '--json',
    ]);
    expect(late.code).toBe(1);
    expect(late.stderr).toContain(
      `the attempt with fence 2 of "${action.key}" is the uncertain one now; your verdict judged the attempt with fence 1`,
    );
    expect(JSON.parse(late.stdout).error.code).toBe('STALE_VERDICT');
    expect((await fx.store.inspect(action.key))?.state).toBe('uncertain');
    const bad = await cli([
      'resolve',
      action.key,
      '--not-applied',
      '--reason',
      'x',
      '--fence',
      '0',
    ]);
    expect(bad.code).toBe(2);
  });

  it('every JSON error carries a code and a message, with the documented exit code', async () => {
    const cases: Array<[string[], Record<string, string>, number, string]> = [
      [['show', 'never-seen', '-o', 'json'], {}, 1, 'NOT_FOUND'],
      [
        ['resolve', '--any-attempt', 'never-seen', '--not-applied', '--reason', 'x', '--json'],
        {},
        1,
        'NOT_UNCERTAIN',
      ],
      [['list', '--state', 'bogus', '-o', 'json'], {}, 2, 'USAGE'],
      [['list', '-o', 'json'], { DATABASE_URL: unreachable }, 3, 'STORE_UNAVAILABLE'],
    ];
    for (const [args, env, exit, code] of cases) {
      const ran = await cli(args, env);
      expect(ran.code, args.join(' ')).toBe(exit);
      const { error } = JSON.parse(ran.stdout.trim().split('\n').at(-1)!);
      expect(error.code, args.join(' ')).toBe(code);
      expect(error.message, args.join(' ')).toEqual(expect.any(String));
      expect(error.message.length).toBeGreaterThan(5);
    }
  });

  it('resolve --dry-run says what the real run says: already decided is not "refused"', async () => {
    const notApplied = await uncertainKey();
    const applied = await uncertainKey();
    await cli([
      'resolve',
      '--any-attempt',
      notApplied.key,
      '--store-only',
      '--not-applied',
      '--reason',
      'absent',
      '--by',
      'ann',
    ]);
    expect(
      (
        await cli([
          'resolve',
          '--any-attempt',
          applied.key,
          '--store-only',
          '--applied',
          '--result',
          '{"id":"ch_1"}',
          '--reason',
          'present',
          '--by',
          'ann',
        ])
      ).code,
    ).toBe(0);
    const file = path.join(tmpdir(), `verdicts-${process.pid}-${Date.now()}.jsonl`);
    await writeFile(
      file,
      [notApplied.key, applied.key, 'never-seen/charge']
        .map((key) => JSON.stringify({ key, applied: false, reason: 'batch' }))
        .join('\n'),
    );
    const keys = (entries: Array<{ key: string }>) => entries.map((entry) => entry.key).sort();
    const reports = [];
    for (const dry of [['--dry-run'], []]) {
      const ran = await cli([
        'resolve',
        '--any-attempt',
        '--from-file',
        file,
        '-o',
        'json',
        ...dry,
      ]);
      expect(ran.code, ran.stderr).toBe(1);
      reports.push(JSON.parse(ran.stdout));
    }
    const [dry, real] = reports;
    expect(keys(dry.alreadyDecided)).toEqual([notApplied.key, applied.key].sort());
    expect(keys(dry.alreadyDecided)).toEqual(keys(real.alreadyDecided));
    expect(keys(dry.refused)).toEqual(['never-seen/charge']);
    expect(keys(real.refused)).toEqual(['never-seen/charge']);
    expect(
      dry.alreadyDecided.find((e: { key: string }) => e.key === notApplied.key).message,
    ).toMatch(/already decided by ann: not applied/);
  });

  it('resolve when Temporal does not answer: pending in the store for a worker, exit 3, and says what happens next', async () => {
    const { key } = await uncertainKey();
    const ran = await cli([
      'resolve',
      '--any-attempt',
      key,
      '--not-applied',
      '--reason',
      'not in the ledger',
      '--address',
      '127.0.0.1:1',
    ]);
    expect(ran.code).toBe(3);
    expect(ran.stderr).toMatch(
      /Temporal at 127.0.0.1:1 \(namespace default\) does not answer; recording the verdict in the store as a pending verdict/,
    );
    expect(ran.stdout).toMatch(/pending verdict #\d+ and decides nothing yet/);
    expect(ran.stdout).toContain(`sideeffect show ${key}`);
    // Not decided until a worker has checked it.
    expect((await fx.store.inspect(key))?.state).toBe('uncertain');
    expect(await fx.store.pendingVerdicts(key)).toMatchObject([
      { applied: false, reason: 'not in the ledger', state: 'pending' },
    ]);
    const shown = await cli(['show', key, '-o', 'json']);
    expect(JSON.parse(shown.stdout).pendingVerdicts).toMatchObject([{ state: 'pending' }]);

    // --profile reads the temporal CLI's profile file, as `temporal --profile` does.
    const again = await uncertainKey();
    const config = path.join(tmpdir(), `temporal-${process.pid}.toml`);
    await writeFile(
      config,
      '[profile.unreachable]\naddress = "127.0.0.1:2"\nnamespace = "elsewhere"\n',
    );
    const profiled = await cli(
      [
        'resolve',
        '--any-attempt',
        again.key,
        '--not-applied',
        '--reason',
        'absent',
        '--profile',
        'unreachable',
      ],
      { TEMPORAL_CONFIG_FILE: config, TEMPORAL_ADDRESS: '', TEMPORAL_NAMESPACE: '' },
    );
    expect(profiled.code).toBe(3);
    expect(profiled.stderr).toMatch(
      /Temporal at 127.0.0.1:2 \(namespace elsewhere\) does not answer/,
    );
  });
});
