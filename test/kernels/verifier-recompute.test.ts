/**
 * The verifier's Recomputer (verifier/recompute.ts) against an independent float64 reference
 * (test/support/reference-model.ts): every rank's gradient sums at θ_{s−1}, their sum and one optimizer
 * step, sketched as the ranks sketch them (core/state/sketch.ts). The honest recomputation must
 * match the reference's sketches within RECOMPUTE_TOLERANCE / 10 — the measured worst ratio is printed,
 * it is the number the tolerance is argued from — and a rank's gradient scaled ×1000, negated or with 5%
 * noise must miss by far more than RECOMPUTE_TOLERANCE. (About 2 s on SwiftShader.)
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OptimizerSpec } from '../../core/training/job';
import { parameterLayout, type SequentialSpec } from '../../core/training/model-spec';
import type { ImageSplitBytes } from '../../core/data/image-batches';
import { gradientSketch, paramsSketch, RECOMPUTE_TOLERANCE, type Sketch, worstRatio } from '../../core/state/sketch';
import { initParams } from '../../kernels/model/layers';
import type { Gpu } from '../../kernels/runtime';
import { Recomputer, type RecomputeRequest, RecomputeError } from '../../verifier/recompute';
import { nodeGpu, skipWithoutNodeGpu } from '../support/node-gpu';
import { referenceAdamW, referenceForwardBackward, referenceSgdMomentum } from '../support/reference-model';
import { mulberry32, randomArray } from '../support/rng';
import { float16BitsToNumber, float32BitsToFloat16Bits } from '../../web/net/fp16';

const SPEC: SequentialSpec = {
  name: 'verifier-test',
  input: [12, 12, 1],
  classes: 10,
  layers: [
    { type: 'conv2d', filters: 4, kernel: 3, padding: 'same', activation: 'relu' },
    { type: 'maxpool2' },
    { type: 'dense', units: 32, activation: 'relu' },
    { type: 'dense', units: 10, activation: 'none' },
  ],
};
const ADAMW: OptimizerSpec = { kind: 'adamw', lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 };
const SGD: OptimizerSpec = { kind: 'sgd', lr: 5e-2, momentum: 0.9 };
const GLOBAL_BATCH = 24;
const STEP_HASH = '5eed0f5a1d2c3b4a';
const SAMPLES = 200;

/** Random 12×12 images and labels: the IDX split the Recomputer gathers from. */
function randomSplit(seed: number): ImageSplitBytes {
  const rand = mulberry32(seed);
  const images = Uint8Array.from({ length: SAMPLES * 144 }, () => Math.floor(rand() * 256));
  const labels = Uint8Array.from({ length: SAMPLES }, () => Math.floor(rand() * 10));
  return { images, labels, count: SAMPLES, rows: 12, cols: 12 };
}

/** θ_{s−1}: seeded parameters nudged off their init, and moments of a few earlier steps (t = 5). */
function randomState(optimizer: OptimizerSpec, seed: number): RecomputeRequest['snapshot'] {
  const layout = parameterLayout(SPEC);
  const rand = mulberry32(seed);
  const params = initParams(SPEC, layout, seed);
  for (let i = 0; i < params.length; i++) params[i] += 0.01 * (rand() - 0.5);
  const n = layout.totalElements;
  const moments =
    optimizer.kind === 'adamw'
      ? [randomArray(rand, n, -1e-2, 1e-2), randomArray(rand, n, 0, 1e-4)]
      : [randomArray(rand, n, -0.1, 0.1)];
  return { params, moments, optimizer: { kind: optimizer.kind, t: 5 } };
}

/** Rank 0 has 10 samples, rank 1 none, rank 2 14: a world of 3 with an empty slice. */
function slicesOf(seed: number): Uint32Array[] {
  const rand = mulberry32(seed);
  const pick = (k: number) => Uint32Array.from({ length: k }, () => Math.floor(rand() * SAMPLES));
  return [pick(10), new Uint32Array(0), pick(14)];
}

/** The half nearest v (ties to even): what the f16 mode stores a dense layer's operands as. */
function nearestHalf(v: number): number {
  const word = new Uint32Array(Float32Array.of(v).buffer)[0];
  return float16BitsToNumber(float32BitsToFloat16Bits(word));
}

/**
 * The float64 reference: per-rank gradient sums, their sum, one optimizer step; with `f16`, the dense
 * layers' operands rounded to halves as the f16 mode stores them.
 */
function reference(split: ImageSplitBytes, req: RecomputeRequest, optimizer: OptimizerSpec, f16 = false) {
  const layout = parameterLayout(SPEC);
  const n = layout.totalElements;
  const { params, moments, optimizer: state } = req.snapshot;
  const own = req.slices.map((slice) => {
    if (slice.length === 0) return new Float64Array(n);
    const x = new Float64Array(slice.length * 144);
    slice.forEach((index, b) => {
      for (let i = 0; i < 144; i++) x[b * 144 + i] = split.images[index * 144 + i] / 255;
    });
    const labels = Array.from(slice, (index) => split.labels[index]);
    const opts = f16 ? { roundDenseOperands: nearestHalf } : {};
    return referenceForwardBackward(SPEC, layout, params, x, labels, slice.length, opts).grads;
  });
  const sum = new Float64Array(n);
  for (const g of own) for (let i = 0; i < n; i++) sum[i] += g[i];
  const gradScale = 1 / req.count;
  const next =
    optimizer.kind === 'adamw'
      ? referenceAdamW(params, sum, moments[0], moments[1], { ...optimizer, gradScale, t: state.t + 1 }).params
      : referenceSgdMomentum(params, sum, moments[0], { ...optimizer, weightDecay: 0, gradScale }).params;
  return { own, next };
}

/** Standard normal numbers (Box–Muller) from a seeded uniform source. */
function gaussian(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

const f32 = (x: ArrayLike<number>) => Float32Array.from(x);
const ratio = (claimed: Sketch, ref: Sketch) => worstRatio(claimed.values, ref.values, ref.mass);

describe.skipIf(await skipWithoutNodeGpu())('verifier Recomputer', () => {
  let gpu: Gpu;
  const made: Recomputer[] = [];
  const recomputer = (optimizer: OptimizerSpec, split: ImageSplitBytes, precision: 'f32' | 'f16' = 'f32') => {
    const job = {
      model: SPEC,
      optimizer,
      globalBatch: GLOBAL_BATCH,
      sync: { mode: 'every-step', compression: 'none' },
      kernels: { precision },
    } as const;
    const r = new Recomputer(gpu, job, split);
    made.push(r);
    return r;
  };
  beforeAll(async () => {
    gpu = await nodeGpu();
  });
  afterAll(() => {
    for (const r of made) r.destroy();
  });

  it('recomputes an f16 job in f16: within the tolerance of the half-rounded float64 reference, and far from float32', async () => {
    const split = randomSplit(11);
    const req: RecomputeRequest = {
      snapshot: randomState(ADAMW, 12),
      stepHash: STEP_HASH,
      world: 3,
      slices: slicesOf(13),
      count: 24,
    };
    const got = await recomputer(ADAMW, split, 'f16').recompute(req);
    const sketches = (f16: boolean) =>
      reference(split, req, ADAMW, f16).own.map((g) => gradientSketch(f32(g), STEP_HASH, 3));
    const worst = (refs: Sketch[]) => Math.max(...got.own.map((s, r) => ratio(s, refs[r])));
    const [honest, againstF32] = [worst(sketches(true)), worst(sketches(false))];
    console.log(
      `verifier-recompute f16: worst honest ratio own ${honest.toExponential(2)} against the half-rounded reference, ` +
        `${againstF32.toExponential(2)} against float32's (tolerance ${RECOMPUTE_TOLERANCE})`,
    );
    expect(honest).toBeLessThan(RECOMPUTE_TOLERANCE / 10);
    expect(againstF32).toBeGreaterThan(honest);
  });

  for (const optimizer of [ADAMW, SGD]) {
    it(`${optimizer.kind}: matches the float64 reference's sketches; perturbed gradients miss by far`, async () => {
      const split = randomSplit(1);
      const slices = slicesOf(2);
      const req: RecomputeRequest = {
        snapshot: randomState(optimizer, 3),
        stepHash: STEP_HASH,
        world: 3,
        slices,
        count: 24,
      };
      const got = await recomputer(optimizer, split).recompute(req);
      const ref = reference(split, req, optimizer);

      const refOwn = ref.own.map((g) => gradientSketch(f32(g), STEP_HASH, 3));
      const ownRatios = got.own.map((s, r) => ratio(s, refOwn[r]));
      const paramsRatio = ratio(got.params, paramsSketch(f32(ref.next), STEP_HASH));
      console.log(
        `verifier-recompute ${optimizer.kind}: worst honest ratio own ${Math.max(...ownRatios).toExponential(2)}, params ${paramsRatio.toExponential(2)} (tolerance ${RECOMPUTE_TOLERANCE})`,
      );
      expect(got.own).toHaveLength(3);
      expect(Array.from(got.own[1].values).every((v) => v === 0)).toBe(true);
      for (const r of ownRatios) expect(r).toBeLessThanOrEqual(RECOMPUTE_TOLERANCE / 10);
      expect(paramsRatio).toBeLessThanOrEqual(RECOMPUTE_TOLERANCE / 10);

      // A liar's own sketch, against the verifier's: rank 2's gradient scaled, negated, made noisy.
      const g = ref.own[2];
      const rand = mulberry32(4);
      const lies = {
        x1000: g.map((v) => 1000 * v),
        negated: g.map((v) => -v),
        'noise 5%': g.map((v) => v * (1 + 0.05 * gaussian(rand))),
      };
      const lieRatios = Object.entries(lies).map(
        ([name, lie]) => [name, ratio(gradientSketch(f32(lie), STEP_HASH, 3), got.own[2])] as const,
      );
      console.log(
        `verifier-recompute ${optimizer.kind}: lies ${lieRatios.map(([n, r]) => `${n} ${r.toExponential(2)}`).join(', ')}`,
      );
      for (const [, r] of lieRatios) expect(r).toBeGreaterThan(10 * RECOMPUTE_TOLERANCE);
    });
  }

  it('refuses a bad request before touching the state, and serves the next one', async () => {
    const split = randomSplit(1);
    const r = recomputer(ADAMW, split);
    const good: RecomputeRequest = {
      snapshot: randomState(ADAMW, 3),
      stepHash: STEP_HASH,
      world: 3,
      slices: slicesOf(2),
      count: 24,
    };
    const first = await r.recompute(good);
    const bad: Partial<RecomputeRequest>[] = [
      { count: 23 },
      { world: 2 },
      { stepHash: 'not-a-hash' },
      { slices: [Uint32Array.of(SAMPLES), new Uint32Array(0), new Uint32Array(0)], count: 1 },
      { snapshot: randomState(SGD, 3) },
    ];
    for (const change of bad) await expect(r.recompute({ ...good, ...change })).rejects.toThrow();
    await expect(r.recompute({ ...good, count: 23 })).rejects.toBeInstanceOf(RecomputeError);
    const again = await r.recompute(good);
    expect(again.paramsHash).toBe(first.paramsHash);
  });
});
