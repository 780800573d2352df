/**
 * The advice to leave every-step sync (coordinator/machine/sync-advice.ts): the decision as a table of
 * usage sums worked out by hand, the suggested inner steps, and the advice through the machine (it shows
 * in `/api/status`, is logged when it comes and goes, and never appears in local mode).
 */
import { describe, expect, it } from 'vitest';
import { statusSummary } from '../../../../coordinator/machine/status-view';
import type { UsageSums } from '../../../../coordinator/machine/state';
import { suggestedInnerSteps, syncAdvice } from '../../../../coordinator/machine/sync-advice';
import { parseJobSpec } from '../../../../core/training/job';
import { Harness } from './coordinator-harness';

const EVERY_STEP = { mode: 'every-step', compression: 'none' } as const;
const LOCAL = {
  mode: 'local',
  innerSteps: 8,
  outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9 },
  compression: 'int8',
  overlap: false,
} as const;

/** Sums of `reports` steps, each `wall` ms long of which `compute` ms computing. */
const sums = (reports: number, wall: number, compute: number): UsageSums => ({
  wallMs: reports * wall,
  computeMs: reports * compute,
  wireSamples: 0,
  wireBytes: 0,
  reports,
});

describe('syncAdvice', () => {
  const cases: Array<[string, Parameters<typeof syncAdvice>[0], (UsageSums | undefined)[], [number, number] | null]> = [
    ['a step syncing as long as it computes: advice', EVERY_STEP, [sums(5, 200, 100), sums(5, 200, 100)], [100, 100]],
    ['sync a little shorter than compute: none', EVERY_STEP, [sums(5, 190, 100)], null],
    ['sync 20× compute: advice with the figures per step', EVERY_STEP, [sums(4, 2100, 100)], [2000, 100]],
    ['the same in local mode: none (its sync is rare by design)', LOCAL, [sums(4, 2100, 100)], null],
    ['fewer than 3 recent reports: no verdict yet', EVERY_STEP, [sums(2, 2100, 100), undefined], null],
    // The busiest member (utilization 0.9) waits little: the others wait for it, not for the network.
    ['a straggler makes the others wait: none', EVERY_STEP, [sums(5, 1000, 900), sums(5, 1000, 100)], null],
    // Both wait: the verdict uses the busier one (utilization 0.25: sync 300, compute 100 per step).
    ['every member waits: the busier one decides', EVERY_STEP, [sums(5, 1000, 100), sums(5, 400, 100)], [300, 100]],
  ];
  for (const [what, sync, members, expected] of cases) {
    it(what, () => {
      const advice = syncAdvice(sync, members);
      if (expected === null) {
        expect(advice).toBeNull();
        return;
      }
      expect(advice).not.toBeNull();
      expect([advice!.syncMsPerStep, advice!.computeMsPerStep]).toEqual(expected);
      expect(advice!.suggested.mode).toBe('local');
      expect(advice!.message).toContain(`"innerSteps":${advice!.suggested.innerSteps}`);
      expect(advice!.message.split('\n')).toHaveLength(1);
    });
  }

  it('suggests local steps that the job file accepts', () => {
    const advice = syncAdvice(EVERY_STEP, [sums(4, 2100, 100)])!;
    const job = parseJobSpec({ model: 'tiny-mlp', globalBatch: 8, epochs: 1, sync: advice.suggested });
    expect(job.sync).toMatchObject({ mode: 'local', innerSteps: advice.suggested.innerSteps, compression: 'int8' });
  });
});

describe('suggestedInnerSteps', () => {
  // H = ratio · (int8 bytes / current bytes) / 0.1, up to a power of two, within [4, 256]; int8 is 1.015625 B/value.
  const cases: Array<[number, 'none' | 'fp16' | 'int8', number]> = [
    [1, 'none', 4], // 2.5 → 4 (the floor)
    [13.3, 'none', 64], // 33.8 → 64 (every-step fp32 at utilization 0.07, bench:sync's broadband row)
    [1, 'fp16', 8], // 5.1 → 8
    [1, 'int8', 16], // 10.2 → 16
    [1000, 'none', 256], // the ceiling
    [Number.POSITIVE_INFINITY, 'none', 256], // no compute claimed at all
  ];
  for (const [ratio, wire, h] of cases)
    it(`is ${h} for sync ${ratio}× compute on a ${wire} wire`, () => expect(suggestedInnerSteps(ratio, wire)).toBe(h));
});

describe('sync advice through the machine', () => {
  const JOB = {
    model: 'tiny-mlp',
    globalBatch: 8,
    epochs: 1,
    minWorkers: 2,
    maxWorkers: 2,
    lastCallMs: 0,
    heartbeatMs: 600_000,
  };

  /** Both ranks report `steps` steps, each `wall` ms after the previous one, claiming `compute` ms. */
  function steps(h: Harness, n: number, wall: number, compute: number): void {
    for (let i = 0; i < n; i++) {
      h.advance(wall);
      h.report('a', { computeMs: compute });
      h.report('b', { computeMs: compute });
    }
  }

  function pair(job: Record<string, unknown>): Harness {
    const h = new Harness(job, 4096);
    h.join('a');
    h.join('b');
    h.readyAll();
    return h;
  }

  it('shows the advice in the status once steps wait on the network, logs it, and clears it when they stop', () => {
    const h = pair(JOB);
    steps(h, 4, 100, 90);
    expect(statusSummary(h.state, h.now).syncAdvice).toBeNull();
    steps(h, 6, 1500, 90);
    const advice = statusSummary(h.state, h.now).syncAdvice;
    expect(advice).not.toBeNull();
    expect(advice!.message).toMatch(/^Every step waits .* on the network for .* of compute/);
    expect(h.logs.filter((l) => l.event === 'sync_advice')).toHaveLength(1);
    // Steps that compute 90 % of their time again, for more than a half-life of the recent window: the advice goes, once.
    steps(h, 40, 1000, 900);
    expect(statusSummary(h.state, h.now).syncAdvice).toBeNull();
    expect(h.logs.filter((l) => l.event === 'sync_advice_cleared')).toHaveLength(1);
  });

  it('never advises a local-steps job, however long its outer steps sync', () => {
    const h = pair({ ...JOB, sync: { mode: 'local', innerSteps: 2, compression: 'int8' } });
    steps(h, 10, 1500, 90);
    expect(h.state.lastCommit.step).toBeGreaterThan(0);
    expect(statusSummary(h.state, h.now).syncAdvice).toBeNull();
    expect(h.logs.some((l) => l.event === 'sync_advice')).toBe(false);
  });
});
