import { describe, expect, it } from 'vitest';
import { resolveInputError } from '../../src/protocol/resolve-input.js';
import { waitingDetails } from '../../src/workflows/reconcile-details.js';

const view = {
  key: 'order-1/charge',
  resource: 'card:7',
  reason: 'apply failed: connection reset',
  fence: 2,
  attempt: { startedAt: '2026-12-02T10:00:00.000Z', endedAt: '2026-12-02T10:00:05.000Z' },
  earlier: [
    {
      fence: 1,
      applied: false,
      by: 'alice',
      at: '2026-12-02T09:59:00.000Z',
      reason: 'not in the export',
    },
  ],
};
const templates = (details: string) =>
  [...details.matchAll(/```json\n([\s\S]*?)\n```/g)].map((match) => JSON.parse(match[1]!));

describe('the waiting reconcile details', () => {
  it('name the attempt judged, its start and end, and the verdicts on earlier attempts', () => {
    const details = waitingDetails({ ...view, namesAttempt: true });
    expect(details).toContain(
      '**This run judges attempt 2** (fence 2; started 2026-12-02T10:00:00.000Z, uncertain since 2026-12-02T10:00:05.000Z)',
    );
    expect(details).toContain(
      '- attempt 1: not applied, by alice at 2026-12-02T09:59:00.000Z (not in the export)',
    );
  });

  it('offer templates that are refused as shown: the attempt and the result are placeholders', () => {
    const shown = templates(waitingDetails({ ...view, namesAttempt: true }));
    expect(shown).toHaveLength(2);
    for (const template of shown) {
      expect(template.fence).toBe('<the attempt you checked: 2 is the latest>');
      expect(resolveInputError(template)).toMatch(/^fence is still the template's placeholder/);
    }
    expect(shown[0]).toMatchObject({
      applied: true,
      result: '<what the effect returned, as JSON>',
    });
  });

  it('in a run held to 0.1, offer no placeholder such a run would record', () => {
    const shown = templates(waitingDetails({ ...view, namesAttempt: false }));
    for (const template of shown) {
      expect(template).not.toHaveProperty('fence');
      expect(template).not.toHaveProperty('result');
    }
  });

  it('show the last refused verdict and why', () => {
    const details = waitingDetails({
      ...view,
      namesAttempt: true,
      lastRefused: {
        at: '2026-12-02T10:01:00.000Z',
        input: { applied: false, reason: 'x', by: 'bob' },
        error: 'names no attempt: add "fence"',
      },
    });
    expect(details).toContain(
      '**Last verdict refused** (2026-12-02T10:01:00.000Z, nothing was decided): names no attempt: add "fence"',
    );
    expect(details).toContain('It was: `{"applied":false,"reason":"x","by":"bob"}`');
  });
});
