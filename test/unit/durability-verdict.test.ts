/**
 * The durability verdict on what a server says about its replication, without the server: which
 * setups can lose an acknowledged commit (and so apply an effect twice), what each declared
 * `durability` lets through, and that a standby is refused under all of them. The same reads on
 * real servers: test/store/postgres-durability.test.ts and test/faults/durability-replication.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { DurabilityAtRiskError, StoreIsStandbyError } from '../../src/core/errors.js';
import {
  checkedDurability,
  durabilityVerdict,
  judged,
  type ReplicationFacts,
} from '../../src/store/postgres/durability.js';

const HOST = 'Postgres at db1:5432, database "app", user "worker"';

function facts(overrides: Partial<ReplicationFacts> = {}): ReplicationFacts {
  return {
    host: HOST,
    inRecovery: false,
    standbys: [],
    idleSlots: [],
    synchronousStandbyNames: '',
    synchronousCommit: 'on',
    ...overrides,
  };
}

const kinds = (f: ReplicationFacts) => durabilityVerdict(f).risks.map((r) => r.kind);

describe('durabilityVerdict', () => {
  it('a single primary with no standby: no risk, and the note says why', () => {
    const report = durabilityVerdict(facts());
    expect(report.mode).toBe('single');
    expect(report.risks).toEqual([]);
    expect(report.notes.join(' ')).toMatch(/no failover can lose a commit/);
    expect(judged(report, 'checked')).toMatchObject({ mode: 'single', risks: [] });
  });

  it('an asynchronous standby: at risk, saying an effect is applied twice and naming the fix', () => {
    const report = durabilityVerdict(
      facts({ standbys: [{ name: 'replica1', syncState: 'async' }] }),
    );
    expect(report.mode).toBe('asynchronous');
    expect(report.risks).toHaveLength(1);
    expect(report.risks[0]!.problem).toMatch(/standby "replica1".*applied twice/);
    expect(report.risks[0]!.fix).toMatch(/synchronous_standby_names/);
    const error = catchOf(() => judged(report, 'checked'));
    expect(error).toBeInstanceOf(DurabilityAtRiskError);
    expect(error).toMatchObject({ code: 'DURABILITY_AT_RISK', host: HOST });
    expect((error as Error).message).toMatch(/applies an effect twice.*fix: make the standbys/);
  });

  it('an idle physical slot counts as a standby that is away', () => {
    const report = durabilityVerdict(facts({ idleSlots: ['dr_site'] }));
    expect(report.mode).toBe('asynchronous');
    expect(report.risks[0]!.problem).toMatch(/replication slot "dr_site"/);
  });

  it('synchronous standbys pass; an extra asynchronous one and hidden states are noted', () => {
    const sync = facts({
      synchronousStandbyNames: 'ANY 1 (a, b)',
      standbys: [
        { name: 'a', syncState: 'quorum' },
        { name: 'c', syncState: 'async' },
      ],
    });
    const report = durabilityVerdict(sync);
    expect(report.mode).toBe('synchronous');
    expect(report.risks).toEqual([]);
    expect(report.notes.join(' ')).toMatch(/"c".*promote only a synchronous standby/);
    const hidden = durabilityVerdict(
      facts({ synchronousStandbyNames: 'a', standbys: [{ name: 'a', syncState: null }] }),
    );
    expect(hidden.risks).toEqual([]);
    expect(hidden.notes.join(' ')).toMatch(/pg_monitor/);
  });

  it('synchronous_commit off is a risk everywhere; local only beside a synchronous standby', () => {
    expect(kinds(facts({ synchronousCommit: 'off' }))).toEqual(['commit-off']);
    expect(kinds(facts({ synchronousCommit: 'local' }))).toEqual([]);
    const syncNames = {
      synchronousStandbyNames: 'a',
      standbys: [{ name: 'a', syncState: 'sync' }],
    };
    expect(kinds(facts({ ...syncNames, synchronousCommit: 'local' }))).toEqual(['commit-local']);
    expect(kinds(facts({ ...syncNames, synchronousCommit: 'remote_write' }))).toEqual([]);
    expect(kinds(facts({ ...syncNames, synchronousCommit: 'remote_apply' }))).toEqual([]);
    expect(
      kinds(facts({ synchronousCommit: 'off', standbys: [{ name: 'r', syncState: 'async' }] })),
    ).toEqual(['asynchronous', 'commit-off']);
  });

  it('a standby is refused under every durability, naming the host', () => {
    const report = durabilityVerdict(facts({ inRecovery: true }));
    expect(report.mode).toBe('standby');
    for (const durability of ['checked', 'managed', 'accept-loss'] as const) {
      const error = catchOf(() => judged(report, durability));
      expect(error).toBeInstanceOf(StoreIsStandbyError);
      expect(error).toMatchObject({ code: 'STORE_IS_STANDBY', host: HOST });
      expect((error as Error).message).toContain(HOST);
    }
  });

  it("'managed' skips the replication verdict but not synchronous_commit off; 'accept-loss' returns the risks", () => {
    const async = durabilityVerdict(
      facts({ standbys: [{ name: 'r', syncState: 'async' }], synchronousCommit: 'local' }),
    );
    expect(judged(async, 'managed').risks).toEqual([]);
    const off = durabilityVerdict(facts({ synchronousCommit: 'off' }));
    expect(catchOf(() => judged(off, 'managed'))).toMatchObject({
      code: 'DURABILITY_AT_RISK',
      risks: [{ kind: 'commit-off' }],
    });
    expect(judged(async, 'accept-loss').risks.map((r) => r.kind)).toEqual(['asynchronous']);
  });
});

describe('checkedDurability', () => {
  it('takes the three values, undefined as checked, and refuses anything else with INVALID_ACTION', () => {
    expect(checkedDurability(undefined)).toBe('checked');
    for (const value of ['checked', 'managed', 'accept-loss'])
      expect(checkedDurability(value)).toBe(value);
    for (const bad of ['Managed', 'off', true, 1, null])
      expect(catchOf(() => checkedDurability(bad))).toMatchObject({
        code: 'INVALID_ACTION',
        field: 'durability',
      });
  });
});

function catchOf(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}
