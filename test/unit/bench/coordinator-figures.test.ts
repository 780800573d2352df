/**
 * bench/coordinator.ts's statistics (bench/lib/coordinator-figures.ts): the memory-per-worker slope
 * it reports, the median and spread over runs, and the other processes' share of the CPU, checked on
 * readings built by hand.
 */
import { describe, expect, it } from 'vitest';
import { fitMemory, othersShare, quantile, slowerThan, spread } from '../../../bench/lib/coordinator-figures';

describe('bench:coordinator figures', () => {
  it('fits the RSS line through readings on a line exactly: intercept, kB per worker, r² = 1', () => {
    const points = [0, 250, 500, 750, 1000].map((workers) => ({ workers, rssMb: 80 + workers * 0.05 }));
    expect(fitMemory(points)).toMatchObject({ interceptMb: 80, kbPerWorker: 51.2, r2: 1 });
  });

  it('fits noisy readings by least squares (against the normal equations worked by hand)', () => {
    // x = 0, 1, 2, 3 thousand workers, y = 10, 12, 15, 15 MB (x̄ = 1.5, ȳ = 13):
    // slope = Σ(x−x̄)(y−ȳ) / Σ(x−x̄)² = (4.5 + 0.5 + 1 + 3) / 5 = 1.8 MB per thousand = 1.8432 kB per worker.
    const points = [10, 12, 15, 15].map((rssMb, i) => ({ workers: i * 1000, rssMb }));
    const fit = fitMemory(points)!;
    expect(fit.kbPerWorker).toBeCloseTo(1.8432, 1);
    expect(fit.interceptMb).toBeCloseTo(13 - 1.8 * 1.5, 1);
    // r² = 9² / (5 · Σ(y−ȳ)² = 5 · 18) = 0.9.
    expect(fit.r2).toBeCloseTo(0.9, 3);
  });

  it('has no slope with one worker count', () => {
    expect(
      fitMemory([
        { workers: 10, rssMb: 1 },
        { workers: 10, rssMb: 2 },
      ]),
    ).toBeNull();
  });

  it('takes the median of odd and even counts of runs, with the spread', () => {
    expect(spread([30, 10, 20])).toEqual({ median: 20, min: 10, max: 30 });
    expect(spread([4, 1, 3, 2])).toEqual({ median: 2.5, min: 1, max: 4 });
    expect(quantile([5, 1, 4, 2, 3], 0.99)).toBe(5);
    expect(quantile([], 0.5)).toBeNaN();
  });

  it("counts the machine's busy ticks that were not the bench's as the others' share", () => {
    const before = { machineBusy: 1000, machineTotal: 4000, ours: 300 };
    // 200 ticks of 400 elapsed: 150 busy, of which 50 ours → others 100 / 400.
    expect(othersShare(before, { machineBusy: 1150, machineTotal: 4400, ours: 350 })).toBe(0.25);
    expect(othersShare(before, before)).toBe(0);
  });

  it('counts the observations above each bound of a histogram between two scrapes of /metrics', () => {
    const scrape = (b: number[], count: number) =>
      [
        '# TYPE h histogram',
        ...['0.005', '0.01', '0.025'].map((le, i) => `h_bucket{le="${le}"} ${b[i]}`),
        `h_bucket{le="+Inf"} ${count}`,
        'h_sum 1',
        `h_count ${count}`,
      ].join('\n');
    // Between the scrapes 100 observations: 90 ≤ 5 ms, 97 ≤ 10 ms, 99 ≤ 25 ms.
    expect(slowerThan(scrape([10, 10, 10], 10), scrape([100, 107, 109], 110), 'h')).toEqual({
      '0.005': 10,
      '0.01': 3,
      '0.025': 1,
    });
  });
});
