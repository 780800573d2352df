/**
 * bench/soak.ts's statistics: the soak test in `npm test` passes or fails on these numbers, so they
 * are checked here on runs built by hand (steps, RSS and CPU ticks sampled every 5 s).
 */
import { describe, expect, it } from 'vitest';
import {
  type CpuTicks,
  growth,
  loadAdjustedLateEarly,
  overSoloByRound,
  type Sample,
  stepsAt,
  summarise,
  timeline,
} from '../../../bench/lib/soak-stats';

const HZ = 100; // USER_HZ
const CORES = 2;

/** A quantity over the run's time: a constant or a function of the seconds since the start. */
type OverTime = number | ((t: number) => number);

/**
 * A run sampled every 5 s for `seconds`: `rate` steps per second, the run using `ours` of the machine's
 * cores (default 1) and other processes `others` (default 0); every process's RSS `rss(t, steps)` MB
 * (default 200).
 */
function run(r: {
  seconds: number;
  rate: OverTime;
  ours?: OverTime;
  others?: OverTime;
  rss?: (t: number, steps: number) => number;
}): Sample[] {
  const at = (x: OverTime | undefined, fallback: number, t: number) =>
    x === undefined ? fallback : typeof x === 'number' ? x : x(t);
  const rss = r.rss ?? (() => 200);
  const samples: Sample[] = [];
  let steps = 0;
  const cpu: CpuTicks = { ours: 0, machineBusy: 0, machineTotal: 0 };
  for (let t = 0; t <= r.seconds; t += 5) {
    if (t > 0) {
      steps += at(r.rate, 0, t - 2.5) * 5;
      const ours = at(r.ours, 1, t - 2.5) * 5 * HZ;
      const others = at(r.others, 0, t - 2.5) * 5 * HZ;
      cpu.ours += ours;
      cpu.machineBusy += ours + others;
      cpu.machineTotal += CORES * 5 * HZ;
    }
    samples.push({ t, steps, coordinatorMb: rss(t, steps), renderersMb: [rss(t, steps)], gpuMb: 150, cpu: { ...cpu } });
  }
  return samples;
}

describe('stepsAt', () => {
  it('interpolates between samples and clamps at both ends', () => {
    const s = run({ seconds: 20, rate: 10 });
    expect(stepsAt(s, 0)).toBe(0);
    expect(stepsAt(s, 7.5)).toBeCloseTo(75, 9);
    expect(stepsAt(s, 99)).toBe(200);
  });
});

describe('loadAdjustedLateEarly', () => {
  it('equals the wall-clock ratio on a quiet machine, so a run that slows down still fails', () => {
    // 12 → 8 steps/s: late/early 2/3 by the wall clock.
    const s = run({ seconds: 150, rate: (t) => (t < 75 ? 12 : 8), ours: 1.6 });
    const r = loadAdjustedLateEarly(s);
    expect(r.ratio).toBeCloseTo(8 / 12, 6);
    expect(r.othersEarly).toBe(0);
    expect(r.othersLate).toBe(0);
    expect(summarise('x', 1, s).lateEarly).toBeCloseTo(0.667, 3);
  });

  it('takes out another job that took a core in the last third of a CPU-bound run', () => {
    // The run had both cores (10 steps/s); another process takes one core from t = 100 and the
    // run, CPU-bound, drops to 5 steps/s. Its work per step did not change.
    const s = run({
      seconds: 150,
      rate: (t) => (t < 100 ? 10 : 5),
      ours: (t) => (t < 100 ? 2 : 1),
      others: (t) => (t < 100 ? 0 : 1),
    });
    const wall = summarise('x', 1, s).lateEarly;
    expect(wall).toBeCloseTo(0.5, 3);
    const r = loadAdjustedLateEarly(s);
    expect(r.ratio).toBeCloseTo(1, 6);
    expect(r.othersLate).toBeCloseTo(0.5, 6);
  });

  it('does not excuse a slowdown larger than the load explains', () => {
    // Others take a quarter of the machine late, but the run fell to a third of its rate.
    const s = run({ seconds: 150, rate: (t) => (t < 100 ? 9 : 3), ours: 1.5, others: (t) => (t < 100 ? 0 : 0.5) });
    const r = loadAdjustedLateEarly(s);
    expect(r.ratio).toBeCloseTo(3 / 0.75 / 9, 6);
    expect(r.ratio).toBeLessThan(0.85);
  });

  it('the same load in both thirds cancels out', () => {
    const s = run({ seconds: 150, rate: (t) => (t < 75 ? 12 : 6), others: 0.7 });
    expect(loadAdjustedLateEarly(s).ratio).toBeCloseTo(0.5, 6);
  });

  it('falls back to the wall-clock ratio when a sample has no CPU ticks', () => {
    const s = run({ seconds: 150, rate: (t) => (t < 100 ? 10 : 5), others: 1 }).map((x) => ({ ...x, cpu: undefined }));
    expect(loadAdjustedLateEarly(s).ratio).toBeCloseTo(0.5, 6);
  });
});

describe('growth', () => {
  it('measures MB per 1,000 steps from the middle third to the last, ignoring warm-up', () => {
    // Warm-up: +100 MB in the first third; then a leak of 50 KB per step.
    const s = run({ seconds: 150, rate: 10, rss: (t, steps) => (t < 50 ? 100 + 2 * t : 200 + 0.05 * steps) });
    const g = growth(s, (x) => x.renderersMb[0]);
    expect(g.per1k).toBeCloseTo(50, 6);
    // Medians of the samples at 50…95 s and 100…150 s: steps 725 and 1,250.
    expect(g.steps).toBeCloseTo(525, 6);
  });
});

describe('timeline', () => {
  it("gives each sample its new steps, the others' share of the machine and the renderer RSS", () => {
    const s = run({ seconds: 10, rate: 10, others: (t) => (t < 5 ? 0 : 0.5), rss: (t) => 200 + t });
    expect(timeline(s)).toBe('5s +50 others 0% renderer MB 205, 10s +50 others 25% renderer MB 210');
  });
});

describe('overSoloByRound', () => {
  it('divides each result by the solo result of its own round and takes the median', () => {
    const at = (name: string, round: number, samplesPerSec: number) => ({
      ...summarise(name, 1, run({ seconds: 20, rate: 1 })),
      samplesPerSec,
      round,
    });
    const r = overSoloByRound([
      at('solo', 1, 1000),
      at('elastic 1 tab', 1, 900),
      at('solo', 2, 500), // the machine slowed down: the same-round ratio does not care
      at('elastic 1 tab', 2, 480),
      at('solo', 3, 800),
      at('elastic 1 tab', 3, 560),
      at('elastic 2 tabs', 4, 300), // no solo in round 4: no ratio
    ]);
    expect(r['elastic 1 tab'].ratios).toEqual([0.9, 0.96, 0.7]);
    expect(r['elastic 1 tab'].median).toBe(0.9);
    expect(r['elastic 2 tabs']).toBeUndefined();
    expect(r.solo).toBeUndefined();
  });
});
