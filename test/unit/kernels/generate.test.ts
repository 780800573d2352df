/**
 * The sampler's next-token rule (kernels/model/generate.ts): the arg-max at temperature 0 (first index on a
 * tie), draws whose frequencies match softmax(logits / T) computed here in float64, refused
 * temperatures. Under 100 ms.
 */
import { describe, expect, it } from 'vitest';
import { argmax, pickToken } from '../../../kernels/model/generate';
import { mulberry32 } from '../../support/rng';

describe('pickToken', () => {
  it('takes the arg-max at temperature 0, the first one on a tie, never a NaN', () => {
    expect(pickToken([0.1, 2, -1, 2], 0, () => 0.99)).toBe(1);
    expect(argmax([Number.NaN, -5, -3])).toBe(2);
    expect(argmax([-Infinity, -Infinity])).toBe(0);
  });

  it('draws with the frequencies of softmax(logits / T)', () => {
    const logits = [1.5, -0.5, 0.25, 1.0, -3];
    const rand = mulberry32(42);
    const draws = 40_000;
    for (const temperature of [0.5, 1, 3]) {
      const counts = new Array(logits.length).fill(0);
      for (let i = 0; i < draws; i++) counts[pickToken(logits, temperature, rand)]++;
      const weights = logits.map((l) => Math.exp(l / temperature));
      const total = weights.reduce((a, b) => a + b, 0);
      weights.forEach((w, k) => {
        const p = w / total;
        // Five standard errors of a binomial frequency.
        const tolerance = 5 * Math.sqrt((p * (1 - p)) / draws) + 1e-4;
        expect(Math.abs(counts[k] / draws - p), `token ${k} at T ${temperature}`).toBeLessThan(tolerance);
      });
    }
  });

  it('never draws a token of weight 0 and refuses bad temperatures', () => {
    const logits = [0, -2000, 0];
    for (const u of [0, 0.4999, 0.5, 0.999999]) expect(pickToken(logits, 1, () => u)).not.toBe(1);
    for (const t of [-0.1, Number.NaN, Infinity])
      expect(() => pickToken(logits, t, Math.random)).toThrow(/temperature/);
  });
});
