import { describe, expect, it } from 'vitest';
import {
  bucketsPerSegment,
  checkIdentity,
  countSketch,
  GRADIENT_SKETCH_BUCKETS,
  gradientSketch,
  gradientSketches,
  identityTolerance,
  RECOMPUTE_TOLERANCE,
  checkHops,
  type HopClaims,
  ringSegmentStart,
  sketchSeed,
  worstRatio,
} from '../../../core/state/sketch';
import { decodeFrame, FrameKind, FRAME_HEADER_BYTES, PayloadEncoding } from '../../../web/net/framing';
import type { Link } from '../../../web/net/link';
import { memoryRing } from '../../../web/net/memory-link';
import { ringAllreduce } from '../../../web/net/ring-allreduce';
import { mulberry32, randomArray } from '../../support/rng';

const HASH_A = '0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef';
const HASH_B = 'f123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef';

/** An independent CountSketch: BigInt arithmetic mod 2^32, one element at a time. */
function referenceSketch(x: Float32Array, seed: ReturnType<typeof sketchSeed>, segments: number, per: number) {
  const values = new Float64Array(segments * per);
  const bits = BigInt(Math.log2(per));
  const m = 1n << 32n;
  for (let s = 0; s < segments; s++) {
    for (let i = Math.floor((s * x.length) / segments); i < Math.floor(((s + 1) * x.length) / segments); i++) {
      const h = (BigInt(seed.a >>> 0) * BigInt(i) + BigInt(seed.b >>> 0)) % m;
      const bucket = bits === 0n ? 0 : Number(h >> (32n - bits));
      const g = (BigInt(seed.c >>> 0) * BigInt(i) + BigInt(seed.d >>> 0)) % m;
      values[s * per + bucket] += g >> 31n ? -x[i] : x[i];
    }
  }
  return values;
}

/** Gradients of realistic shape: most elements small, a few large, signs mixed. */
function gradients(rand: () => number, n: number): Float32Array {
  const g = randomArray(rand, n, -1, 1);
  for (let i = 0; i < n; i++) g[i] *= rand() < 0.05 ? 10 : 0.01;
  return g;
}

async function allreduce(
  data: Float32Array[],
  corrupt?: (link: Link, rank: number) => Link,
  records?: { sent: Float32Array; received: Float32Array }[],
): Promise<void> {
  const { rings } = memoryRing(data.length);
  const views = rings.map((r) => (corrupt ? { ...r, right: r.right && corrupt(r.right, r.rank) } : r));
  await Promise.all(
    views.map((ring, r) =>
      ringAllreduce(ring, data[r], {
        id: { round: 1, step: 1, seq: 0 },
        timeoutMs: 10_000,
        ...(records ? { record: records[r] } : {}),
      }),
    ),
  );
}

/**
 * A link that multiplies the float32 partial sums it sends during the reduce-scatter by `factor`: at
 * ring step 0 that is its own contribution (unless `forwardedOnly`), later steps forward the chain's sums.
 */
function scalingForwarder(
  link: Link,
  size: number,
  factor: number,
  opts: { segments?: Set<number>; rank: number; forwardedOnly?: boolean },
): Link {
  const { segments, rank, forwardedOnly } = opts;
  return new Proxy(link, {
    get(target, prop, receiver) {
      if (prop !== 'send') return Reflect.get(target, prop, receiver);
      return (message: ArrayBuffer) => {
        const frame = decodeFrame(message);
        const segment = (((rank - frame.ringStep) % size) + size) % size;
        const first = forwardedOnly ? 1 : 0;
        const forwarded = frame.kind === FrameKind.RingChunk && frame.ringStep >= first && frame.ringStep < size - 1;
        if (forwarded && frame.encoding === PayloadEncoding.Float32 && (!segments || segments.has(segment))) {
          const copy = message.slice(0);
          const payload = new Float32Array(copy, FRAME_HEADER_BYTES, frame.payloadLength / 4);
          for (let i = 0; i < payload.length; i++) payload[i] *= factor;
          target.send(copy);
          return;
        }
        target.send(message);
      };
    },
  });
}

describe('CountSketch (core/sketch.ts)', () => {
  it('equals an independent BigInt implementation, bucket for bucket, for several worlds', () => {
    const rand = mulberry32(7);
    for (const size of [1, 2, 3, 4, 7, 32]) {
      const x = randomArray(rand, 1003, -3, 3);
      const per = bucketsPerSegment(size);
      const seed = sketchSeed(HASH_A, 'gradient');
      const got = countSketch(x, seed, size, per).values;
      const ref = referenceSketch(x, seed, size, per);
      for (let b = 0; b < ref.length; b++) expect(got[b]).toBeCloseTo(ref[b], 10);
      expect(size * per).toBeLessThanOrEqual(GRADIENT_SKETCH_BUCKETS);
    }
  });

  it('sketches several vectors in one pass exactly as one at a time (groups of four, then the rest)', () => {
    const rand = mulberry32(8);
    const xs = Array.from({ length: 6 }, () => randomArray(rand, 2_001, -2, 2));
    for (const size of [1, 3, 32]) {
      const together = gradientSketches(xs, HASH_A, size);
      xs.forEach((x, j) => {
        const alone = gradientSketch(x, HASH_A, size);
        expect(Array.from(together[j].values)).toEqual(Array.from(alone.values));
        expect(Array.from(together[j].mass)).toEqual(Array.from(alone.mass));
      });
    }
  });

  it('cuts segments exactly where the ring allreduce does (floor(s·n/size))', () => {
    expect([0, 1, 2, 3, 4].map((s) => ringSegmentStart(s, 10, 4))).toEqual([0, 2, 5, 7, 10]);
  });

  it('seeds from the state hash: the same hash the same sketch, another hash an unrelated one', () => {
    const x = randomArray(mulberry32(1), 5000, -1, 1);
    const a = gradientSketch(x, HASH_A, 4).values;
    expect(gradientSketch(x, HASH_A, 4).values).toEqual(a);
    const b = gradientSketch(x, HASH_B, 4).values;
    expect(worstRatio(b, a, gradientSketch(x, HASH_A, 4).mass)).toBeGreaterThan(0.01);
    expect(() => sketchSeed('not a hash', 'gradient')).toThrow(/not a state hash/);
  });

  it('is linear: the sketch of a sum is the sum of the sketches', () => {
    const rand = mulberry32(3);
    // Integers: the float32 sums are exact, so any difference would be the sketch's.
    const xs = [0, 1, 2].map(() => Float32Array.from({ length: 4096 }, () => Math.round((rand() - 0.5) * 1000)));
    const sum = xs[0].map((v, i) => v + xs[1][i] + xs[2][i]);
    const parts = xs.map((x) => gradientSketch(x, HASH_A, 3).values);
    const whole = gradientSketch(sum, HASH_A, 3).values;
    for (let b = 0; b < whole.length; b++) expect(parts[0][b] + parts[1][b] + parts[2][b]).toBe(whole[b]);
  });

  it('tells a scaled, negated or 5 % noisy gradient from the honest one, and not a float32 reordering', () => {
    const rand = mulberry32(9);
    const g = gradients(rand, 100_000);
    const ref = gradientSketch(g, HASH_A, 4);
    const ratio = (x: Float32Array) => worstRatio(gradientSketch(x, HASH_A, 4).values, ref.values, ref.mass);
    expect(ratio(g.map((v) => v * 1000))).toBeGreaterThan(100);
    expect(ratio(g.map((v) => -v))).toBeGreaterThan(0.05);
    expect(ratio(g.map((v) => v + 0.05 * Math.abs(v) * (rand() * 2 - 1) * Math.sqrt(3)))).toBeGreaterThan(
      RECOMPUTE_TOLERANCE,
    );
    // A relative float32 error on every element (what another GPU's summation order gives) stays far below.
    const reordered = g.map((v) => v * (1 + (rand() * 2 - 1) * 2 ** -20));
    expect(ratio(reordered)).toBeLessThan(RECOMPUTE_TOLERANCE / 100);
  });
});

describe('the ring identity and the hop checks on the real ring allreduce (memory links)', () => {
  /** Each rank's own sums, reduced on a real ring that records every hop; then every rank's claims. */
  async function ringClaims(
    own: Float32Array[],
    corrupt?: (link: Link, rank: number) => Link,
  ): Promise<{ claims: HopClaims[]; sum: ReturnType<typeof gradientSketch>; owns: number[][] }> {
    const size = own.length;
    const data = own.map((g) => g.slice());
    const records = own.map((g) => ({ sent: new Float32Array(g.length), received: new Float32Array(g.length) }));
    await allreduce(data, corrupt, records);
    const sk = (x: Float32Array) => gradientSketch(x, HASH_A, size);
    const claims = own.map((g, r) => {
      const sent = sk(records[r].sent);
      const received = sk(records[r].received);
      return {
        own: Array.from(sk(g).values),
        sent: Array.from(sent.values),
        sentMass: Array.from(sent.mass),
        received: Array.from(received.values),
        receivedMass: Array.from(received.mass),
      };
    });
    return { claims, sum: sk(data[0]), owns: claims.map((c) => c.own) };
  }

  it('holds for honest ranks: Σ own = sum and every hop balances, within the derived tolerance', async () => {
    const rand = mulberry32(11);
    let worst = 0;
    for (const size of [2, 3, 4, 6]) {
      const tolerance = identityTolerance(size, 'none');
      const { claims, sum, owns } = await ringClaims(Array.from({ length: size }, () => gradients(rand, 60_001)));
      const identity = checkIdentity(owns, Array.from(sum.values), Array.from(sum.mass), size, tolerance);
      const hops = checkHops(claims, Array.from(sum.values), Array.from(sum.mass), tolerance);
      expect(identity.ok, `size ${size}: worst ${identity.worst}`).toBe(true);
      expect(hops).toMatchObject({ liars: [], disputes: [] });
      worst = Math.max(worst, identity.worst / tolerance, hops.worst / tolerance);
    }
    // The measured margin: honest rounding used less than a tenth of the tolerance.
    expect(worst).toBeLessThan(0.1);
  });

  it('a rank whose link scales what it forwards: its receiver disputes the hop (what was sent is not what arrived)', async () => {
    const rand = mulberry32(12);
    const size = 4;
    const liar = 2;
    const own = Array.from({ length: size }, () => gradients(rand, 40_000));
    const { claims, sum, owns } = await ringClaims(own, (link, rank) =>
      rank === liar ? scalingForwarder(link, size, 1.5, { rank }) : link,
    );
    const tolerance = identityTolerance(size, 'none');
    expect(checkIdentity(owns, Array.from(sum.values), Array.from(sum.mass), size, tolerance).ok).toBe(false);
    // Its record holds what it meant to send; its right neighbour received something else.
    expect(checkHops(claims, Array.from(sum.values), Array.from(sum.mass), tolerance)).toMatchObject({
      liars: [],
      disputes: [[liar, liar + 1]],
    });
  });

  it('a rank that claims honest own sums but adds something else contradicts itself', async () => {
    const rand = mulberry32(13);
    const size = 3;
    const liar = 1;
    const own = Array.from({ length: size }, () => gradients(rand, 30_000));
    // It adds its gradient ×2 (the ring records that truthfully) and claims the honest one as its own.
    const doubled = own.map((g, r) => (r === liar ? g.map((x) => 2 * x) : g));
    const { claims, sum } = await ringClaims(doubled);
    claims[liar].own = Array.from(gradientSketch(own[liar], HASH_A, size).values);
    const tolerance = identityTolerance(size, 'none');
    expect(checkHops(claims, Array.from(sum.values), Array.from(sum.mass), tolerance)).toMatchObject({
      liars: [liar],
      disputes: [],
    });
  });
});
