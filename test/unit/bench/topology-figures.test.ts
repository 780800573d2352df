/**
 * The arithmetic behind `bench:topology` (bench/lib/topology-figures.ts: power-law fits, medians,
 * ring-to-groups ratios, the join verdict) on points with known answers, and the virtual clock
 * (bench/lib/virtual-clock.ts) its simulations run on.
 */
import { describe, expect, it } from 'vitest';
import { fitExponent, joinVerdict, median, summarize } from '../../../bench/lib/topology-figures';
import { inVirtualTime } from '../../../bench/lib/virtual-clock';

describe('bench:topology figures', () => {
  it('fits the exponent of a power law exactly when the points lie on one', () => {
    const points = [8, 16, 32, 64, 128].map((world) => ({ world, ms: 3 * world ** 0.5 }));
    const fit = fitExponent(points);
    expect(fit.exponent).toBeCloseTo(0.5, 10);
    expect(fit.r2).toBeCloseTo(1, 10);
    expect(fitExponent([8, 16, 32].map((world) => ({ world, ms: 40 * (world - 1) }))).exponent).toBeGreaterThan(1);
    expect(Number.isNaN(fitExponent([{ world: 8, ms: 1 }]).exponent)).toBe(true);
  });

  it('takes medians and pairs each ring point with the groups point of its world', () => {
    expect(median([5, 1, 3])).toBe(3);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    const point = (topology: 'ring' | 'groups', world: number, ms: number) => ({
      profile: 'p',
      topology,
      world,
      groups: [world],
      ms,
      busMBps: 1,
    });
    const { ratios, exponents } = summarize([point('ring', 8, 100), point('groups', 8, 50), point('ring', 16, 200)]);
    expect(ratios).toEqual([{ profile: 'p', world: 8, groupsOverRing: 0.5 }]);
    expect(exponents.map((e) => e.topology)).toEqual(['ring']);
  });

  it('judges joins against twice a single joiner’s slowest time', () => {
    const join = (joiners: number, maxMs: number) => ({ profile: 'p', source: 'peers', joiners, medianMs: 0, maxMs });
    expect(joinVerdict(join(1, 100), join(32, 199))).toBe(true);
    expect(joinVerdict(join(1, 100), join(32, 201))).toBe(false);
    expect(joinVerdict(undefined, join(32, 1))).toBeNull();
  });
});

describe('virtual time', () => {
  it('jumps from timer to timer, runs microtasks in between, and puts the real clock back', async () => {
    const realNow = performance.now;
    const order: string[] = [];
    const { value, ms } = await inVirtualTime(async () => {
      const t0 = performance.now();
      await new Promise((resolve) => setTimeout(resolve, 5000));
      order.push(`a@${performance.now() - t0}`);
      const cancelled = setTimeout(() => order.push('never'), 10);
      clearTimeout(cancelled);
      await Promise.all([
        new Promise((resolve) => setTimeout(() => resolve(order.push('c')), 200)),
        new Promise((resolve) => setTimeout(() => resolve(order.push('b')), 100)),
      ]);
      return 'done';
    });
    expect(value).toBe('done');
    expect(ms).toBe(5200);
    expect(order).toEqual(['a@5000', 'b', 'c']);
    expect(performance.now).toBe(realNow);
  });

  it('rethrows what the simulation throws', async () => {
    await expect(
      inVirtualTime(async () => {
        await new Promise((resolve) => setTimeout(resolve, 10));
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
  });
});
