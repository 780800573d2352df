/**
 * When a rank is judged hung (core/training/hang.ts): the floor, twice the learned time, and the room its
 * own jitter needs, as TCP's retransmission timeout (RFC 6298: RTO = SRTT + 4·RTTVAR, RTTVAR ← ¾·RTTVAR +
 * ¼·|SRTT − R|, RTTVAR starting at R/2). The references below are RFC 6298's formulas written out here.
 */
import { describe, expect, it } from 'vitest';
import { hangAllowanceMs, smoothDeviation } from '../../../core/training/hang';

describe('hangAllowanceMs', () => {
  it('is the most of the floor, twice the learned time, and the learned time plus four mean deviations', () => {
    expect(hangAllowanceMs(100, 3000)).toBe(3000);
    expect(hangAllowanceMs(2000, 3000)).toBe(4000);
    expect(hangAllowanceMs(2000, 3000, 100)).toBe(4000); // 2000 + 400 < 2 × 2000
    expect(hangAllowanceMs(500, 3000, 1000)).toBe(4500); // a jittery rank: 500 + 4 × 1000
    expect(hangAllowanceMs(null, 3000, 1000)).toBeNull();
    expect(hangAllowanceMs(500, 3000, Number.NaN)).toBe(3000);
    expect(hangAllowanceMs(500, 3000, -5)).toBe(3000);
  });
});

describe('smoothDeviation (RFC 6298’s RTTVAR)', () => {
  it('starts at half the first miss, then moves a quarter of the way to each new miss', () => {
    const samples: [number, number][] = [
      [100, 300],
      [100, 90],
      [120, 2000],
      [110, 100],
    ];
    let ours: number | null = null;
    let reference: number | null = null;
    for (const [expected, took] of samples) {
      ours = smoothDeviation(ours, expected, took);
      const miss = Math.abs(took - expected);
      reference = reference === null ? miss / 2 : 0.75 * reference + 0.25 * miss;
      expect(ours).toBeCloseTo(reference, 12);
    }
    expect(reference).toBeCloseTo(0.75 * (0.75 * (0.75 * 100 + 0.25 * 10) + 0.25 * 1880) + 0.25 * 10, 12);
  });

  it('keeps the previous value for a measurement that is not one', () => {
    expect(smoothDeviation(50, Number.NaN, 10)).toBe(50);
    expect(smoothDeviation(null, 10, -1)).toBeNull();
  });
});
