import { describe, expect, it } from 'vitest';
import {
  addFloat16Into,
  decodeFloat16Into,
  encodeFloat16,
  float16BitsToNumber,
  float16ScaleExponent,
  float32BitsToFloat16Bits,
} from '../../../../core/wire/fp16';
import { mulberry32 } from '../../../support/rng';

/**
 * Independent reference: all finite binary16 values from the IEEE definition, sorted; the nearest one
 * to x by search, ties to the even significand. No bit tricks shared with the implementation.
 */
const positiveHalves: number[] = [];
for (let e = 0; e < 31; e++) {
  for (let m = 0; m < 1024; m++) positiveHalves.push(e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
}
const HALF_MAX = positiveHalves[positiveHalves.length - 1];

function referenceHalf(x: number): number {
  if (Number.isNaN(x)) return NaN;
  const a = Math.abs(x);
  const sign = x < 0 || Object.is(x, -0) ? -1 : 1;
  // Beyond max + half an ulp (2^15 · (2 − 2^-11)) rounds to infinity.
  if (a >= 65520) return sign * Infinity;
  let lo = 0;
  let hi = positiveHalves.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (positiveHalves[mid] <= a) lo = mid;
    else hi = mid;
  }
  let pick: number;
  if (a >= HALF_MAX) pick = positiveHalves.length - 1;
  else {
    const dLo = a - positiveHalves[lo];
    const dHi = positiveHalves[hi] - a;
    pick = dLo < dHi ? lo : dHi < dLo ? hi : lo % 2 === 0 ? lo : hi; // index parity = significand parity
  }
  return sign * positiveHalves[pick];
}

function f32Bits(x: number): number {
  return new Uint32Array(new Float32Array([x]).buffer)[0];
}

function halfOf(x: number): number {
  return float16BitsToNumber(float32BitsToFloat16Bits(f32Bits(x)));
}

describe('float32 → float16 conversion', () => {
  it('matches the reference on random bit patterns across the whole float32 range', () => {
    const rand = mulberry32(11);
    const bits = new Uint32Array(1);
    const asFloat = new Float32Array(bits.buffer);
    for (let i = 0; i < 200_000; i++) {
      bits[0] = Math.floor(rand() * 2 ** 32);
      const x = asFloat[0];
      const got = halfOf(x);
      const want = referenceHalf(x);
      if (!Object.is(got, want) && !(got === 0 && want === 0 && Object.is(1 / got, 1 / want))) {
        expect.fail(`x=${x} (bits 0x${bits[0].toString(16)}): got ${got}, want ${want}`);
      }
    }
  });

  it('matches the reference on random values in binary16 range, including subnormals', () => {
    const rand = mulberry32(12);
    for (let i = 0; i < 100_000; i++) {
      const x = Math.fround((rand() < 0.5 ? -1 : 1) * 2 ** (-27 + rand() * 44));
      const got = halfOf(x);
      if (got !== referenceHalf(x)) expect.fail(`x=${x}: got ${got}, want ${referenceHalf(x)}`);
    }
  });

  it('rounds exact midpoints to the even neighbour, in normal and subnormal ranges', () => {
    for (let i = 0; i + 1 < positiveHalves.length; i += 97) {
      const mid = Math.fround((positiveHalves[i] + positiveHalves[i + 1]) / 2);
      if (mid !== (positiveHalves[i] + positiveHalves[i + 1]) / 2) continue; // not representable in float32
      expect(halfOf(mid)).toBe(referenceHalf(mid));
      expect(halfOf(-mid)).toBe(-referenceHalf(mid));
    }
    expect(halfOf(2 ** -25)).toBe(0); // halfway to the smallest subnormal: ties to even (zero)
    expect(halfOf(Math.fround(2 ** -25 * 1.0000001))).toBe(2 ** -24);
    expect(halfOf(1 + 2 ** -11)).toBe(1); // halfway between 1 and 1 + 2^-10
    expect(halfOf(1 + 3 * 2 ** -11)).toBe(1 + 2 ** -9);
  });

  it('saturates to infinity beyond the range and keeps NaN, ±Inf and −0', () => {
    expect(halfOf(65504)).toBe(65504);
    expect(halfOf(65519)).toBe(65504);
    expect(halfOf(65520)).toBe(Infinity);
    expect(halfOf(-1e30)).toBe(-Infinity);
    expect(halfOf(Infinity)).toBe(Infinity);
    expect(halfOf(NaN)).toBeNaN();
    expect(Object.is(halfOf(-0), -0)).toBe(true);
  });
});

describe('scaled float16 frames', () => {
  it('choose a scale putting the largest magnitude in [2^14, 2^15)', () => {
    for (const maxAbs of [1, 2 ** 14, 2 ** 15 - 1, 2 ** 15, 3e-30, 7e30, 1e-44, 3.4e38]) {
      const e = float16ScaleExponent(maxAbs);
      if (e > -128) expect(maxAbs * 2 ** -e).toBeGreaterThanOrEqual(2 ** 14);
      expect(maxAbs * 2 ** -e).toBeLessThan(2 ** 15);
    }
    expect(float16ScaleExponent(0)).toBe(0);
    expect(float16ScaleExponent(Infinity)).toBe(0);
  });

  it('keep every element within 2^-11 relative (plus a floor far below the frame maximum), at any magnitude', () => {
    const rand = mulberry32(13);
    for (const magnitude of [1e-12, 1e-3, 1, 7e4, 1e9, 1e30]) {
      const n = 1000;
      const src = new Float32Array(n);
      for (let i = 0; i < n; i++) src[i] = (rand() * 2 - 1) * magnitude * 2 ** (-8 * rand());
      const halves = new Uint16Array(n);
      const e = encodeFloat16(src, halves, new Float32Array(n));
      const back = new Float32Array(n);
      decodeFloat16Into(halves, e, back);
      let maxAbs = 0;
      for (const x of src) maxAbs = Math.max(maxAbs, Math.abs(x));
      for (let i = 0; i < n; i++) {
        const bound = 2 ** -11 * Math.abs(src[i]) + maxAbs * 2 ** -39;
        if (!(Math.abs(back[i] - src[i]) <= bound))
          expect.fail(`magnitude ${magnitude} [${i}]: ${src[i]} → ${back[i]}`);
      }
      // And the rounding is really to binary16 (not a no-op): most values change.
      let changed = 0;
      for (let i = 0; i < n; i++) if (back[i] !== src[i]) changed++;
      expect(changed).toBeGreaterThan(n / 2);
    }
  });

  it('add decoded values with one float32 rounding per element', () => {
    const src = new Float32Array([1, -2.5, 1000, 3e-5]);
    const halves = new Uint16Array(4);
    const e = encodeFloat16(src, halves, new Float32Array(4));
    const decoded = new Float32Array(4);
    decodeFloat16Into(halves, e, decoded);
    const target = new Float32Array([0.1, 0.2, 0.3, 0.4]);
    const want = target.map((t, i) => Math.fround(t + decoded[i]));
    addFloat16Into(halves, e, target);
    expect(target).toEqual(want);
  });
});
