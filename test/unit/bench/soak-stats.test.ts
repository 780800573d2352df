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
  trend,
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

describe('trend', () => {
  const renderer = (x: Sample) => x.renderersMb[0];
  /** A deterministic wobble of ±4 MB, the size of the RSS noise between 5 s samples in the runs here. */
  const wobble = (t: number) => 4 * Math.sin(t * 1.7) * Math.cos(t * 0.31);

  it('takes one step up that stays flat for no leak, and reports the step (a CI run of 846 steps)', () => {
    // CI's failing soak run: steps since the last sample and the renderer's RSS every 5 s (+23 MB at 85 s).
    const added = [32, 34, 31, 28, 28, 30, 28, 28, 26, 30, 24, 25, 36, 30, 26, 24, 23, 29, 26, 26, 31, 30, 29];
    const more = [30, 26, 29, 29, 25, 29, 27, 26];
    const mb = [261, 246, 246, 246, 253, 239, 247, 244, 249, 249, 248, 254, 258, 259, 249, 274, 280, 279, 279];
    const mbMore = [279, 279, 285, 273, 279, 279, 279, 280, 280, 282, 283];
    const steps = [...added, ...more];
    const rss = [...mb, ...mbMore];
    const samples: Sample[] = [{ t: 0, steps: 0, coordinatorMb: 200, renderersMb: [257.5], gpuMb: 173 }];
    let total = 0;
    for (let i = 0; i < rss.length; i++) {
      total += steps[i];
      samples.push({ t: 5 * (i + 1), steps: total, coordinatorMb: 200, renderersMb: [rss[i]], gpuMb: 173 });
    }
    // The medians of the thirds read this as 23 MB over ~290 steps, 80 MB per 1,000: a leak.
    expect(growth(samples, renderer).per1k).toBeGreaterThan(40);
    const t = trend(samples, renderer);
    // 11 MB per 1,000 steps is left: the RSS drifted a few MB on each side of the step. The bound is 40.
    expect(Math.abs(t.leak)).toBeLessThan(20);
    expect(t.jumpMb).toBeGreaterThan(15);
    expect(t.jumpMb).toBeLessThan(35);
  });

  it('measures a steady leak as its slope, with or without a one-off step on top', () => {
    const leak = (t: number, steps: number) => 200 + 0.056 * steps + wobble(t);
    const plain = trend(run({ seconds: 150, rate: 6, rss: leak }), renderer);
    // The free jump can take a little of a slope (it fits the wobble at the best split): within 20 %.
    expect(plain.leak).toBeGreaterThan(45);
    expect(plain.leak).toBeLessThan(67);
    expect(plain.overSteps).toBe(600);
    const stepped = trend(run({ seconds: 150, rate: 6, rss: (t, n) => leak(t, n) + (t >= 85 ? 25 : 0) }), renderer);
    expect(stepped.leak).toBeGreaterThan(45);
    expect(stepped.leak).toBeLessThan(67);
    expect(stepped.jumpMb).toBeGreaterThan(15);
  });

  it('sees a staircase (2.8 MB kept every 50 steps, the old checkpoint retention) as a leak, not one jump', () => {
    const stairs = (t: number, steps: number) => 240 + 2.8 * Math.floor(steps / 50) + wobble(t);
    const t = trend(run({ seconds: 150, rate: 6, rss: stairs }), renderer);
    expect(t.leak).toBeGreaterThan(40);
  });

  it('reads a flat process as flat, and a stalled run (no steps) as nothing to measure', () => {
    expect(trend(run({ seconds: 150, rate: 6, rss: (t) => 220 + wobble(t) }), renderer).leak).toBeLessThan(10);
    expect(trend(run({ seconds: 150, rate: 0 }), renderer)).toEqual({ leak: 0, jumpMb: 0, overSteps: 0 });
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
