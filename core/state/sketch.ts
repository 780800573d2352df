/**
 * Linear sketches of gradients and parameters: how the coordinator checks contributions it cannot see
 * (docs/threat-model.md, "Contributions that are checked").
 *
 * A sketch is a CountSketch: element i of a vector goes, with a random sign, into one of a few buckets;
 * a bucket holds the signed sum of its elements (float64). It is linear, so the sketches of the ranks'
 * own gradient sums must add up to the sketch of the all-reduced sum, up to the float rounding of the
 * ring; and a verifier that recomputes a rank's gradient from the committed state must find the
 * rank's sketch again, up to the rounding differences between two honest GPUs.
 *
 * The buckets and signs come from the hash of the state the step produced (`sketchSeed`), which no
 * rank knows before every rank has sent its contribution: a liar cannot hide a change in the part of
 * the vector a sketch does not see. Hashing is multiply-shift (Dietzfelbinger): one `Math.imul` and a
 * shift per element for the bucket, one for the sign — a pass over 1 M floats costs about a
 * millisecond in V8, so every step can carry sketches.
 *
 * Gradient sketches are laid out by ring segment (`ringSegmentStart`, the all-reduce's own geometry):
 * bucket block j holds segment j's elements, so each hop of the reduce-scatter (one segment from one
 * rank to the next) can be checked on its own block (`checkHops`).
 */

/** Total buckets of a gradient sketch, over all segments (≥ 1 bucket per segment). */
export const GRADIENT_SKETCH_BUCKETS = 32;
/** Buckets of a parameter sketch (one segment). */
export const PARAMS_SKETCH_BUCKETS = 32;

/** The four multiply-shift constants of one step: bucket (a odd, b) and sign (c odd, d). */
export interface SketchSeed {
  readonly a: number;
  readonly b: number;
  readonly c: number;
  readonly d: number;
}

export interface Sketch {
  /** Signed bucket sums, bucket-block per segment. */
  values: Float64Array;
  /** The L1 mass of each bucket (Σ|x_i|): the scale float rounding errors are measured against. */
  mass: Float64Array;
}

/** First element of ring segment `s` of an `n`-element vector cut into `size` segments (ring-allreduce.ts). */
export function ringSegmentStart(s: number, n: number, size: number): number {
  return Math.floor((s * n) / size);
}

/** Buckets per segment for a world of `size`: the largest power of two with size·B ≤ GRADIENT_SKETCH_BUCKETS. */
export function bucketsPerSegment(size: number): number {
  if (!Number.isInteger(size) || size < 1) throw new Error(`bucketsPerSegment: world ${size}`);
  let b = 1;
  while (size * b * 2 <= GRADIENT_SKETCH_BUCKETS) b *= 2;
  return b;
}

/** splitmix32 step: a well-mixed 32-bit value from a 32-bit state. */
function mix32(x: number): number {
  let z = (x + 0x9e3779b9) | 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

/**
 * The sketch constants of a step, from the hash of the state that step produced (a hex string) and a
 * purpose tag (gradient sketches and the parameter sketch use unrelated constants).
 */
export function sketchSeed(stateHash: string, purpose: 'gradient' | 'params'): SketchSeed {
  if (!/^[0-9a-f]{16,128}$/.test(stateHash)) throw new Error(`sketchSeed: not a state hash: ${stateHash.slice(0, 80)}`);
  let h = purpose === 'gradient' ? 0x243f6a88 : 0x13198a2e;
  for (let i = 0; i < stateHash.length; i++) h = mix32(h ^ stateHash.charCodeAt(i)) ^ Math.imul(i + 1, 0x27d4eb2f);
  const a = mix32(h) | 1;
  const b = mix32(h ^ 0x6a09e667);
  const c = mix32(h ^ 0xbb67ae85) | 1;
  const d = mix32(h ^ 0x3c6ef372);
  return { a, b, c, d };
}

/**
 * The CountSketches of `xs` (vectors of one length) cut into `segments` ring segments of `perSegment`
 * buckets each (a power of two): bucket of element i = segment·perSegment + (a·i + b mod 2^32) >>>
 * (32 − log2 perSegment), sign = + when (c·i + d mod 2^32) < 2^31. Sums in float64, element order:
 * identical on every host. A step sketches four vectors with the same constants: they go through in
 * groups of four, each element's bucket and sign hashed once per group (1.5× faster than four passes
 * over an `mlp`'s gradients), the rest one at a time.
 */
export function countSketches(
  xs: readonly Float32Array[],
  seed: SketchSeed,
  segments: number,
  perSegment: number,
): Sketch[] {
  if (perSegment < 1 || (perSegment & (perSegment - 1)) !== 0)
    throw new Error(`countSketch: ${perSegment} buckets per segment is not a power of two`);
  const n = xs[0]?.length ?? 0;
  if (xs.some((x) => x.length !== n)) throw new Error('countSketches: the vectors differ in length');
  const out = xs.map(() => ({
    values: new Float64Array(segments * perSegment),
    mass: new Float64Array(segments * perSegment),
  }));
  const shift = 32 - Math.log2(perSegment);
  // Bucket and sign of element i are the same for every vector; shift 32 (one bucket per segment)
  // would be a no-op in JS, so `mask` zeroes the hash instead.
  const plan: BucketPlan = { ...seed, shift, mask: shift === 32 ? 0 : -1, n, segments, perSegment };
  let j = 0;
  for (; j + 4 <= xs.length; j += 4) addFour(xs.slice(j, j + 4), out.slice(j, j + 4), plan);
  for (; j < xs.length; j++) addOne(xs[j], out[j], plan);
  return out;
}

/** Where `countSketches` puts element i of a vector of length `n`: its seed and the bucket arithmetic. */
interface BucketPlan extends SketchSeed {
  shift: number;
  mask: number;
  n: number;
  segments: number;
  perSegment: number;
}

/** Add four vectors into their sketches, each element's bucket and sign hashed once for the four. */
function addFour(xs: readonly Float32Array[], out: Sketch[], plan: BucketPlan): void {
  const { a, b, c, d, shift, mask, n, segments, perSegment } = plan;
  const [x0, x1, x2, x3] = xs;
  const [o0, o1, o2, o3] = out;
  for (let s = 0; s < segments; s++) {
    const end = ringSegmentStart(s + 1, n, segments);
    const base = s * perSegment;
    for (let i = ringSegmentStart(s, n, segments); i < end; i++) {
      const q = base + (((Math.imul(a, i) + b) >>> shift) & mask);
      // ±1: a + (−1)·v is exactly a − v.
      const sign = (Math.imul(c, i) + d) >>> 31 ? -1 : 1;
      const y0 = x0[i];
      const y1 = x1[i];
      const y2 = x2[i];
      const y3 = x3[i];
      o0.values[q] += sign * y0;
      o1.values[q] += sign * y1;
      o2.values[q] += sign * y2;
      o3.values[q] += sign * y3;
      o0.mass[q] += Math.abs(y0);
      o1.mass[q] += Math.abs(y1);
      o2.mass[q] += Math.abs(y2);
      o3.mass[q] += Math.abs(y3);
    }
  }
}

/** Add one vector into its sketch. */
function addOne(x: Float32Array, sketch: Sketch, plan: BucketPlan): void {
  const { a, b, c, d, shift, mask, n, segments, perSegment } = plan;
  const { values, mass } = sketch;
  for (let s = 0; s < segments; s++) {
    const end = ringSegmentStart(s + 1, n, segments);
    const base = s * perSegment;
    for (let i = ringSegmentStart(s, n, segments); i < end; i++) {
      const q = base + (((Math.imul(a, i) + b) >>> shift) & mask);
      const v = x[i];
      if ((Math.imul(c, i) + d) >>> 31) values[q] -= v;
      else values[q] += v;
      mass[q] += Math.abs(v);
    }
  }
}

/** The CountSketch of one vector (`countSketches` of it alone). */
export function countSketch(x: Float32Array, seed: SketchSeed, segments: number, perSegment: number): Sketch {
  return countSketches([x], seed, segments, perSegment)[0];
}

/** The gradient sketches of rank vectors (own sums, hops, reduced sums) of one step, in a world of `size`. */
export function gradientSketches(xs: readonly Float32Array[], stateHash: string, size: number): Sketch[] {
  return countSketches(xs, sketchSeed(stateHash, 'gradient'), size, bucketsPerSegment(size));
}

/** The gradient sketch of a rank's own sums or of the all-reduced sums, in a world of `size`. */
export function gradientSketch(x: Float32Array, stateHash: string, size: number): Sketch {
  return gradientSketches([x], stateHash, size)[0];
}

/** The parameter sketch of the state a step produced. */
export function paramsSketch(params: Float32Array, stateHash: string): Sketch {
  return countSketch(params, sketchSeed(stateHash, 'params'), 1, PARAMS_SKETCH_BUCKETS);
}

/** What a rank reports with a step when the job verifies (plain arrays: the JSON of a step report). */
export interface StepSketches {
  /** Sketch of this rank's own gradient sums, before the all-reduce. */
  own: number[];
  /** Sketch of the all-reduced sums every rank applied (identical bytes on every rank). */
  sum: number[];
  /** Bucket masses of `sum`. */
  sumMass: number[];
  /** Sketch of the partial sums this rank sent in the reduce-scatter (as decoded), and their masses. */
  sent: number[];
  sentMass: number[];
  /** Sketch of the partial sums it received in the reduce-scatter, and their masses. */
  received: number[];
  receivedMass: number[];
  /**
   * Sketch of the parameters after the step: `PARAMS_SKETCH_BUCKETS` buckets in every-step mode; in
   * local mode laid out like the gradient sketches (segments), so the outer step's arithmetic can be
   * checked against the sum and the momentum bucket by bucket.
   */
  params: number[];
  /**
   * int8 wire: the `int8Slack` masses (core/wire/ring-sum.ts) of what it sent, what it received and the
   * sum: how far each bucket's encodes may have moved it (`checkHops` allows them).
   */
  sentSlack?: number[];
  receivedSlack?: number[];
  sumSlack?: number[];
  /** Local mode: the outer momentum after the outer step (gradient layout), agreed like the sum. */
  outer?: number[];
  /** Local mode: this rank's optimizer moments after its inner steps (gradient layout), one per moment buffer. */
  moments?: number[][];
}

/**
 * Relative tolerance of the ring identity Σ_r own_r = sum, per unit of the bucket's mass: the rounding
 * of `size − 1` float32 additions per element (unit roundoff 2^-24), or of an fp16 re-encode at each
 * hop (2^-11), times a margin of 16 for the sum's mass being smaller than the summands' (cancellation
 * between ranks). Measured honest ratios are far below (docs/threat-model.md).
 */
export function identityTolerance(size: number, compression: 'none' | 'fp16' | 'int8'): number {
  // int8's rounding is bounded by the slack each rank reports (`checkHops`); what remains is float32's.
  const unit = compression === 'fp16' ? 2 ** -11 : 2 ** -24;
  return 16 * Math.max(1, size) * unit;
}

/**
 * Relative tolerance between a rank's own sketch (or the parameter sketch) and the verifier's
 * recomputation, per unit of the bucket's mass. Measured: the verifier (Node, Dawn on SwiftShader)
 * against a float64 recomputation differs by ≤ 1.2e-7 (docs/verifier.md), against Chromium tabs by
 * the figure test/browser/verification.test.ts prints. Two float32 GPUs summing in other orders stay
 * near 1e-6 (√n·2^-24 over a layer's fan-in, averaged over a bucket); 1e-4 leaves two orders of margin
 * for what was not measured (other vendors, a ReLU that flips) and still catches a gradient with 1 %
 * multiplicative noise (ratio 6e-4 – 1e-3 on `mlp`). A change below it is within what honest GPUs
 * could disagree by.
 */
export const RECOMPUTE_TOLERANCE = 1e-4;

/** The worst bucket of `claimed` against `reference`: |claimed − reference| / (mass + tiny). */
export function worstRatio(claimed: ArrayLike<number>, reference: ArrayLike<number>, mass: ArrayLike<number>): number {
  if (claimed.length !== reference.length || mass.length !== reference.length) return Number.POSITIVE_INFINITY;
  let worst = 0;
  for (let i = 0; i < reference.length; i++) {
    const c = claimed[i];
    if (!Number.isFinite(c)) return Number.POSITIVE_INFINITY;
    const ratio = Math.abs(c - reference[i]) / (mass[i] + 1e-30);
    // A NaN (a broken reference) must fail, never pass: only a ratio known to be small is accepted.
    if (!(ratio <= worst)) worst = Number.isNaN(ratio) ? Number.POSITIVE_INFINITY : ratio;
  }
  return worst;
}

export interface IdentityCheck {
  ok: boolean;
  /** The worst bucket's |Σ own − sum| / mass, over all buckets. */
  worst: number;
  /** Segments whose buckets break the identity (their chains carried a wrong partial sum). */
  badSegments: number[];
}

/** Check Σ_r own_r = sum bucket by bucket (every rank's `sum` sketch must already be known identical). */
export function checkIdentity(
  own: number[][],
  sum: number[],
  sumMass: number[],
  size: number,
  tolerance: number,
): IdentityCheck {
  const per = sum.length / size;
  let worst = 0;
  const bad = new Set<number>();
  for (let b = 0; b < sum.length; b++) {
    let total = 0;
    for (const o of own) total += o[b];
    const ratio = Math.abs(total - sum[b]) / (sumMass[b] + 1e-30);
    if (!(ratio <= tolerance)) bad.add(Math.floor(b / per));
    if (!(ratio <= worst)) worst = ratio;
  }
  return { ok: bad.size === 0, worst, badSegments: [...bad].sort((x, y) => x - y) };
}

/** One rank's reduce-scatter claims, by rank, as the hop check reads them. */
export interface HopClaims {
  own: readonly number[];
  sent: readonly number[];
  sentMass: readonly number[];
  received: readonly number[];
  receivedMass: readonly number[];
  /** int8 wire: how far the encodes may have moved each bucket of what it sent / received (`int8Slack`). */
  sentSlack?: readonly number[];
  receivedSlack?: readonly number[];
}

export interface HopCheck {
  /** Ranks whose own claims contradict each other: what they sent is not what they received plus their own. */
  liars: number[];
  /** Hops where the sender's and the receiver's sketches of the same bytes differ: one of the two lies. */
  disputes: [from: number, to: number][];
  /** The worst |sent − (received + own)| / mass over the ranks' hops, for the record. */
  worst: number;
}

/**
 * Check every hop of the reduce-scatter (ring-allreduce.ts: at ring step g rank r sends segment r − g to
 * r + 1; the owner r − 1 of segment r ends its chain). Each sent segment must be what the sender
 * received at the step before plus its own contribution (its own alone at step 0), within `tolerance`
 * of its mass (float32 or fp16 rounding of one addition) — with an int8 wire, plus the slack of the
 * encode that produced it (`sentSlack`, `sumSlack`: half a block step per value, read from the decoded
 * values, so a liar cannot widen it without sending a larger value); the owner's received plus own
 * must be the final `sum`; and what a receiver says it received must equal, bit for bit, what its
 * sender says it sent, slack included (both sketch the same decoded values in the same order). A liar
 * must then either contradict itself (caught alone) or contradict a neighbour about one hop (a
 * dispute between the two).
 */
export function checkHops(
  ranks: readonly HopClaims[],
  sum: readonly number[],
  sumMass: readonly number[],
  tolerance: number,
  sumSlack?: readonly number[],
): HopCheck {
  const size = ranks.length;
  const per = sum.length / size;
  const liars = new Set<number>();
  const disputes: [number, number][] = [];
  let worst = 0;
  // |got − want| within `tolerance` of the mass, plus the int8 slack of the encode that produced `got`.
  const off = (got: number, want: number, mass: number, slack = 0) => {
    const ratio = Math.max(0, Math.abs(got - want) - slack) / (mass + 1e-30);
    if (!(ratio <= worst)) worst = Number.isNaN(ratio) ? Number.POSITIVE_INFINITY : ratio;
    return !(ratio <= tolerance);
  };
  for (let r = 0; r < size; r++) {
    const me = ranks[r];
    const next = ranks[(r + 1) % size];
    let disputed = false;
    for (let g = 0; g < size - 1; g++) {
      const j = (((r - g) % size) + size) % size;
      for (let b = j * per; b < (j + 1) * per; b++) {
        const want = g === 0 ? me.own[b] : me.received[b] + me.own[b];
        if (off(me.sent[b], want, me.sentMass[b], me.sentSlack?.[b])) liars.add(r);
        if (
          !Object.is(next.received[b], me.sent[b]) ||
          !Object.is(next.receivedMass[b], me.sentMass[b]) ||
          !Object.is(next.receivedSlack?.[b], me.sentSlack?.[b])
        )
          disputed = true;
      }
    }
    if (disputed) disputes.push([r, (r + 1) % size]);
    // The owner of segment r + 1 ends its chain: received plus own is the final sum.
    const j = (r + 1) % size;
    for (let b = j * per; b < (j + 1) * per; b++)
      if (off(sum[b], me.received[b] + me.own[b], sumMass[b], sumSlack?.[b])) liars.add(r);
  }
  return { liars: [...liars].sort((x, y) => x - y), disputes, worst };
}
