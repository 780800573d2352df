/**
 * core/wire/ring-sum.ts against the real thing: the sum `ringSum` computes from the ranks' inputs must be
 * the bytes `ringAllreduce` leaves on every rank (memory links, every wire, several worlds and
 * chunkings), and `int8Slack` must bound what an int8 encode moved each value.
 */
import { describe, expect, it } from 'vitest';
import { int8Slack, ringSum, wireRoundTrip, type WireCompression } from '../../../../core/wire/ring-sum';
import { memoryRing } from '../../../../web/net/memory-link';
import { ringAllreduce } from '../../../../web/net/ring-allreduce';
import { mulberry32, randomArray } from '../../../support/rng';

const bits = (x: Float32Array) => new Uint32Array(x.buffer, x.byteOffset, x.length);

function firstDifference(a: Float32Array, b: Float32Array): number {
  const x = bits(a);
  const y = bits(b);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
  return x.length === y.length ? -1 : Math.min(x.length, y.length);
}

/** Inputs with a spread of magnitudes (a few large values per block), as gradients have. */
function inputs(size: number, n: number, seed: number): Float32Array[] {
  const rand = mulberry32(seed);
  return Array.from({ length: size }, () => {
    const x = randomArray(rand, n, -1, 1);
    for (let i = 0; i < n; i += 97) x[i] *= 50;
    return x;
  });
}

describe('ringSum is what the ring allreduce leaves on every rank', () => {
  it.each([
    ['none', 2, 10_007, undefined],
    ['none', 3, 40_000, 1000],
    ['fp16', 3, 40_000, undefined],
    ['fp16', 4, 9_999, 700],
    ['int8', 2, 50_000, undefined],
    ['int8', 3, 100_003, undefined],
    ['int8', 4, 20_000, 512],
  ] as const)('%s, a world of %i, %i values (chunks of %s)', async (compression, size, n, chunkElements) => {
    const xs = inputs(size, n, size * 1000 + n);
    const expected = ringSum(xs, compression as WireCompression, chunkElements);
    const { rings } = memoryRing(size);
    const data = xs.map((x) => x.slice());
    await Promise.all(
      rings.map((ring, r) =>
        ringAllreduce(ring, data[r], {
          id: { round: 1, step: 1, seq: 0 },
          timeoutMs: 20_000,
          compression: compression as WireCompression,
          ...(chunkElements ? { chunkElements } : {}),
        }),
      ),
    );
    for (const [r, got] of data.entries()) expect(firstDifference(got, expected), `rank ${r}`).toBe(-1);
    // The wire is real: a compressed sum is not the float32 one.
    if (compression !== 'none') expect(firstDifference(expected, ringSum(xs, 'none', chunkElements))).not.toBe(-1);
  });

  it('a world of one is its input, untouched', () => {
    const [x] = inputs(1, 1000, 3);
    expect(firstDifference(ringSum([x], 'int8'), x)).toBe(-1);
  });
});

describe('int8Slack bounds every int8 encode by the decoded values alone', () => {
  it('|x − decode(encode(x))| ≤ slack, and the slack is about half a block step, not more', () => {
    for (const size of [1, 3, 4]) {
      const [x] = inputs(1, 70_001, size);
      const decoded = new Float32Array(x.length);
      // Encoded as a ring of `size` sends it: chunks from each segment's start.
      for (let s = 0; s < size; s++) {
        const start = Math.floor((s * x.length) / size);
        const end = Math.floor(((s + 1) * x.length) / size);
        wireRoundTrip(x.subarray(start, end), decoded.subarray(start, end), 'int8');
      }
      const slack = int8Slack(decoded, size);
      let used = 0;
      const over: string[] = [];
      for (let i = 0; i < x.length; i++) {
        const err = Math.abs(x[i] - decoded[i]);
        if (!(err <= slack[i]) && over.length < 3) over.push(`[${i}] error ${err} slack ${slack[i]}`);
        used = Math.max(used, err / slack[i]);
      }
      expect(over).toEqual([]);
      // Tight: the worst value uses most of it (a bound far above the error would let a liar hide).
      expect(used).toBeGreaterThan(0.9);
    }
  });
});
