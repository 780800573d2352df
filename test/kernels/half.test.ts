/**
 * The float32 → packed-half cast of the mixed-precision mode (kernels/ops/half.ts) against the
 * binary16 reference of web/net/fp16.ts (round to nearest, ties to even). WGSL lets a conversion
 * round to either neighbour, so the test demands a neighbour and reports how many were the nearest.
 */
import { describe, expect, it } from 'vitest';
import { halfWords, toHalf } from '../../kernels/ops/half';
import { createTensor, readBuffer, submitCalls } from '../../kernels/runtime';
import { float16BitsToNumber, float32BitsToFloat16Bits } from '../../core/wire/fp16';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { mulberry32 } from '../support/rng';

const HALF_MAX = 65504;

/** The two halves around x (equal when x is a half), as numbers. */
function neighbours(x: number): [number, number] {
  const f = new Float32Array([x]);
  const nearest = float32BitsToFloat16Bits(new Uint32Array(f.buffer)[0]);
  const value = float16BitsToNumber(nearest);
  if (value === x) return [value, value];
  // The other neighbour is one half-ulp step away on the side of x.
  const towardX = x > value === value >= 0 ? nearest + 1 : nearest - 1;
  return [value, float16BitsToNumber(towardX)];
}

async function cast(values: Float32Array, size = values.length): Promise<number[]> {
  const gpu = await nodeGpu();
  const x = createTensor(gpu, [values.length], 'x', values);
  const packed = createTensor(gpu, [halfWords(values.length) + 1], 'packed');
  await withValidation(gpu, () => submitCalls(gpu, [toHalf(gpu, { x, packed }, { size }).call]));
  const words = new Uint32Array(await readBuffer(gpu, packed.buffer, packed.size * 4));
  const halves: number[] = [];
  for (const w of words) halves.push(float16BitsToNumber(w & 0xffff), float16BitsToNumber(w >>> 16));
  return halves;
}

describe('toHalf (float32 → packed halves)', () => {
  it('rounds every value to a neighbouring half, clamps beyond ±65504, and reports ties-to-even agreement', async () => {
    const rand = mulberry32(7);
    const n = 4099;
    const values = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      // Magnitudes from subnormal halves to beyond the half range, both signs.
      const magnitude = 2 ** (rand() * 44 - 26);
      values[i] = (rand() < 0.5 ? -1 : 1) * magnitude;
    }
    values.set([0, -0, 1, -1, 65504, 70000, -1e9, 2 ** -24, 1 + 2 ** -11], 0);
    const halves = await cast(values);
    let nearest = 0;
    for (let i = 0; i < n; i++) {
      const x = Math.max(-HALF_MAX, Math.min(HALF_MAX, values[i]));
      const [near, other] = neighbours(x);
      const got = halves[i];
      // A subnormal may be flushed to zero (WGSL allows it), with the sign kept or not.
      const flushed = Math.abs(x) < 2 ** -14 && got === 0;
      if (!(got === near || got === other || flushed))
        throw new Error(`[${i}] ${values[i]} became ${got}, neighbours ${near} and ${other}`);
      if (got === near) nearest++;
    }
    console.log(
      `[variants] toHalf: ${nearest}/${n} conversions were the nearest half (ties to even), the rest a neighbour`,
    );
    expect(halves[4]).toBe(HALF_MAX);
    expect(halves[5]).toBe(HALF_MAX);
    expect(halves[6]).toBe(-HALF_MAX);
  });

  it('converts only the first `size` elements and leaves the high half of an odd size’s last word 0', async () => {
    const values = Float32Array.from([1.5, -2.25, 3.125, 100, 7]);
    const halves = await cast(values, 3);
    expect(halves.slice(0, 4)).toEqual([1.5, -2.25, 3.125, 0]);
    expect(halves.slice(4)).toEqual([0, 0, 0, 0]);
  });

  it('refuses a size larger than the source', async () => {
    const gpu = await nodeGpu();
    const x = createTensor(gpu, [4], 'x');
    const packed = createTensor(gpu, [8], 'packed');
    expect(() => toHalf(gpu, { x, packed }, { size: 5 })).toThrow(/exceeds/);
    expect(() => toHalf(gpu, { x, packed: createTensor(gpu, [1], 'small') }, { size: 4 })).toThrow(/exceeds/);
  });
});
