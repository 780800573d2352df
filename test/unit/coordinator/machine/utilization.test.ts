/**
 * Compute utilization and wire bytes per sample (coordinator/machine/utilization.ts): decaying sums with
 * numbers worked out by hand, the clamp of a tab's claim to the measured wall time, and the accounting
 * through the machine (wall time from the rank's own previous report, so waiting for a straggler counts).
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_STATUS_PAGE } from '../../../../core/protocol/views';
import { statusResponse } from '../../../../coordinator/machine/status-view';
import { addUsage, USAGE_HALF_LIFE_MS, usageView } from '../../../../coordinator/machine/utilization';
import { Harness } from './coordinator-harness';
import { workerOf } from '../../../../coordinator/machine/worker-table';

describe('addUsage and usageView', () => {
  it('give utilization = compute / wall and bytes per sample of one report', () => {
    const u = addUsage(undefined, { samples: 32, computeMs: 60, wireBytes: 3200 }, 100, 1000);
    expect(u).toEqual({
      at: 1000,
      recent: { wallMs: 100, computeMs: 60, wireSamples: 32, wireBytes: 3200, reports: 1 },
      total: { wallMs: 100, computeMs: 60, wireSamples: 32, wireBytes: 3200, reports: 1 },
    });
    expect(usageView(u.recent)).toEqual({ utilization: 0.6, bytesPerSample: 100 });
  });

  it('clamp a claim of more compute than wall time to 100%, and a negative one to 0', () => {
    const over = addUsage(undefined, { samples: 8, computeMs: 1e7, wireBytes: 0 }, 250, 0);
    expect(usageView(over.recent).utilization).toBe(1);
    const under = addUsage(over, { samples: 8, computeMs: -5 }, 250, 0);
    // 250 of compute over 500 of wall.
    expect(usageView(under.total).utilization).toBe(0.5);
  });

  it('halve the recent sums after one half-life, and keep the run totals undecayed', () => {
    const first = addUsage(undefined, { samples: 32, computeMs: 60, wireBytes: 3200 }, 100, 1000);
    const second = addUsage(first, { samples: 32, computeMs: 250, wireBytes: 0 }, 200, 1000 + USAGE_HALF_LIFE_MS);
    // recent: {100, 60, 32, 3200, 1 report}·½ + {200, min(250, 200), 32, 0, 1} = {250, 230, 48, 1600, 1.5}
    expect(second.recent).toEqual({ wallMs: 250, computeMs: 230, wireSamples: 48, wireBytes: 1600, reports: 1.5 });
    expect(usageView(second.recent).utilization).toBeCloseTo(230 / 250, 12);
    expect(usageView(second.recent).bytesPerSample).toBeCloseTo(1600 / 48, 12);
    // totals: {300, 260, 64, 3200, 2}
    expect(second.total).toEqual({ wallMs: 300, computeMs: 260, wireSamples: 64, wireBytes: 3200, reports: 2 });
    expect(usageView(second.total)).toEqual({ utilization: 260 / 300, bytesPerSample: 50 });
    expect(second.at).toBe(1000 + USAGE_HALF_LIFE_MS);
  });

  it('follow a change: two half-lives of a slower link move the recent value, not the total as much', () => {
    // 10 reports at 0.9 utilization, then 10 at 0.3, 6 s apart (60 s: two half-lives).
    let u = addUsage(undefined, { samples: 1, computeMs: 90, wireBytes: 0 }, 100, 0);
    for (let i = 1; i < 10; i++) u = addUsage(u, { samples: 1, computeMs: 90, wireBytes: 0 }, 100, i * 6000);
    for (let i = 10; i < 20; i++) u = addUsage(u, { samples: 1, computeMs: 30, wireBytes: 0 }, 100, i * 6000);
    expect(usageView(u.total).utilization).toBeCloseTo(0.6, 12);
    // Weights 2^(-k·6000/30000), k = 0..19: the last ten (k = 0..9) carry 1/(1 + 2^-2) = 0.8 of the mass.
    const recent = usageView(u.recent).utilization!;
    expect(recent).toBeCloseTo(0.3 * 0.8 + 0.9 * 0.2, 10);
  });

  it('leave reports without wireBytes (older tabs) out of bytes per sample, and a zero wall out of the time', () => {
    const u = addUsage(undefined, { samples: 16, computeMs: 5 }, 0, 0);
    expect(u.recent).toEqual({ wallMs: 0, computeMs: 0, wireSamples: 0, wireBytes: 0, reports: 0 });
    expect(usageView(u.recent)).toEqual({ utilization: null, bytesPerSample: null });
    expect(usageView(undefined)).toEqual({ utilization: null, bytesPerSample: null });
    const v = addUsage(u, { samples: 16, computeMs: 5, wireBytes: 800 }, Number.NaN, 10);
    expect(usageView(v.total)).toEqual({ utilization: null, bytesPerSample: 50 });
  });
});

describe('usage through the machine', () => {
  const JOB = {
    model: 'tiny-mlp',
    globalBatch: 8,
    epochs: 1,
    minWorkers: 2,
    maxWorkers: 2,
    lastCallMs: 0,
    heartbeatMs: 60_000,
  };

  /** a and b (ranks 0 and 1) in a round of two, 100 ms after the steps could start. */
  function pairTraining(): Harness {
    const h = new Harness(JOB, 64);
    h.join('a');
    h.join('b');
    h.readyAll();
    h.advance(100);
    return h;
  }

  it('measures wall time from each rank’s previous report, clamps claims, and sums the job over ranks', () => {
    // Step 1: both report 100 ms after train. a claims 80 ms and sent 400 bytes for its 4 samples;
    // b claims 10 s (clamped to 100 ms) and sent 400 bytes.
    const h = pairTraining();
    h.report('a', { computeMs: 80, wireBytes: 400 });
    h.report('b', { computeMs: 10_000, wireBytes: 400 });
    // Step 2: a reports 50 ms later, b 150 ms later (the commit of step 2 waits for b); then step 3
    // 100 ms after b: a's wall for step 3 runs from its own report of step 2 (250 ms), not from the commit.
    h.advance(50);
    h.report('a', { computeMs: 40, wireBytes: 400 });
    h.advance(100);
    h.report('b', { computeMs: 100, wireBytes: 400 });
    h.advance(100);
    h.report('a', { computeMs: 50, wireBytes: 400 });
    h.report('b', { computeMs: 90, wireBytes: 400 });
    expect(h.state.lastCommit.step).toBe(3);
    const a = workerOf(h.state.workers, h.worker('a').workerId!)!.usage!;
    const b = workerOf(h.state.workers, h.worker('b').workerId!)!.usage!;
    // a: wall 100 + 50 + 200, compute 80 + 40 + 50; b: wall 100 + 150 + 100, compute 100 + 100 + 90.
    expect(a.total).toEqual({ wallMs: 350, computeMs: 170, wireSamples: 12, wireBytes: 1200, reports: 3 });
    expect(b.total).toEqual({ wallMs: 350, computeMs: 290, wireSamples: 12, wireBytes: 1200, reports: 3 });
    const job = h.state.usage!.total;
    expect(job).toEqual({ wallMs: 700, computeMs: 460, wireSamples: 24, wireBytes: 2400, reports: 6 });
    const view = statusResponse(h.state, h.now, DEFAULT_STATUS_PAGE);
    expect(view.usage.total).toEqual({ utilization: 460 / 700, bytesPerSample: 100 });
    // Recent values decay over 350 ms at most: within 1% of the totals here.
    expect(view.usage.recent.utilization).toBeCloseTo(460 / 700, 2);
    const byId = new Map(view.world.items.map((w) => [w.id, w]));
    expect(byId.get(h.worker('a').workerId!)!.utilization).toBeCloseTo(170 / 350, 2);
    expect(byId.get(h.worker('b').workerId!)!.bytesPerSample).toBeCloseTo(100, 9);
    expect(view.usage.halfLifeMs).toBe(USAGE_HALF_LIFE_MS);
  });

  it('keeps a rejected report out of the sums', () => {
    const h = pairTraining();
    h.report('a', { computeMs: 80, wireBytes: 400 });
    const before = h.state.usage;
    h.report('b', { computeMs: 80, wireBytes: 1e9, samples: 3 }); // wrong sample count: bad_samples
    expect(h.state.usage).toEqual(before);
    expect(workerOf(h.state.workers, h.worker('b').workerId!)!.usage).toBeUndefined();
  });
});
