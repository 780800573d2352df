/**
 * The verifier's Recomputer (verifier/recompute.ts) against an independent float64 reference
 * (test/support/reference-model.ts). Every-step mode: every rank's gradient sums at θ_{s−1}, their sum
 * and one optimizer step; local mode: one rank's inner steps, its pseudo-gradient, its end moments and
 * the outer step predicted from the agreed sum; each sketched as the ranks sketch them
 * (core/state/sketch.ts). The honest recomputation must match the reference's sketches within
 * RECOMPUTE_TOLERANCE / 10 — the measured worst ratio is printed, it is the number the tolerance is
 * argued from — and a rank's contribution scaled ×1000, negated or with 5% noise must miss by far more
 * than RECOMPUTE_TOLERANCE. (A few seconds on SwiftShader.)
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OptimizerSpec } from '../../core/training/job';
import { parameterLayout, type SequentialSpec } from '../../core/training/model-spec';
import { ImageBatches, type ImageSplitBytes } from '../../core/data/image-batches';
import { gradientSketch, paramsSketch, RECOMPUTE_TOLERANCE, type Sketch, worstRatio } from '../../core/state/sketch';
import { initParams } from '../../kernels/model/layers';
import type { Gpu } from '../../kernels/runtime';
import { Recomputer, type RecomputeJob, type RecomputeRequest, RecomputeError } from '../../verifier/recompute';
import { nodeGpu, skipWithoutNodeGpu } from '../support/node-gpu';
import { SENSITIVITY_MARGIN, sensitivityOf } from '../../coordinator/machine/checks';
import { referenceAdamW, referenceForwardBackward, referenceSgdMomentum } from '../support/reference-model';
import { mulberry32, randomArray } from '../support/rng';
import { float16BitsToNumber, float32BitsToFloat16Bits } from '../../core/wire/fp16';

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
const EVERY_STEP: RecomputeJob['sync'] = { mode: 'every-step', compression: 'none' };

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
  const [{ slices, count }] = req.steps;
  const own = slices.map((slice) => referenceGradients(split, params, slice, f16));
  const sum = new Float64Array(n);
  for (const g of own) for (let i = 0; i < n; i++) sum[i] += g[i];
  const gradScale = 1 / count;
  const next =
    optimizer.kind === 'adamw'
      ? referenceAdamW(params, sum, moments[0], moments[1], { ...optimizer, gradScale, t: state.t + 1 }).params
      : referenceSgdMomentum(params, sum, moments[0], { ...optimizer, weightDecay: 0, gradScale }).params;
  return { own, next };
}

/** The float64 gradient sums of `slice`'s samples at `params` (zeros for no samples; `f16`: half-rounded dense operands). */
function referenceGradients(
  split: ImageSplitBytes,
  params: ArrayLike<number>,
  slice: Uint32Array,
  f16 = false,
): Float64Array {
  const layout = parameterLayout(SPEC);
  if (slice.length === 0) return new Float64Array(layout.totalElements);
  const x = new Float64Array(slice.length * 144);
  slice.forEach((index, b) => {
    for (let i = 0; i < 144; i++) x[b * 144 + i] = split.images[index * 144 + i] / 255;
  });
  const labels = Array.from(slice, (index) => split.labels[index]);
  const opts = f16 ? { roundDenseOperands: nearestHalf } : {};
  return referenceForwardBackward(SPEC, layout, params, x, labels, slice.length, opts).grads;
}

/** Standard normal numbers (Box–Muller) from a seeded uniform source. */
function gaussian(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

const f32 = (x: ArrayLike<number>) => Float32Array.from(x);
/** The framing poison's common offset of the output biases (the logits' ulp becomes ~1e-3). */
const OFFSET = 1e4;
const ratio = (claimed: Sketch, ref: Sketch) => worstRatio(claimed.values, ref.values, ref.mass);

describe.skipIf(await skipWithoutNodeGpu())('verifier Recomputer', () => {
  let gpu: Gpu;
  const made: Recomputer[] = [];
  const recomputer = (
    optimizer: OptimizerSpec,
    split: ImageSplitBytes,
    sync: RecomputeJob['sync'] = EVERY_STEP,
    precision: 'f32' | 'f16' = 'f32',
  ) => {
    const job = { model: SPEC, optimizer, globalBatch: GLOBAL_BATCH, sync, kernels: { precision } };
    const r = new Recomputer(gpu, job, { batches: new ImageBatches(split, GLOBAL_BATCH), count: split.count });
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
      mode: 'every-step',
      steps: [{ slices: slicesOf(13), count: 24 }],
      fresh: false,
    };
    const got = await recomputer(ADAMW, split, EVERY_STEP, 'f16').recompute(req);
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
        mode: 'every-step',
        steps: [{ slices, count: 24 }],
        fresh: false,
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

  for (const optimizer of [ADAMW, SGD]) {
    it(`local mode, ${optimizer.kind}: a rank's inner steps, pseudo-gradient, end moments and the outer step match the reference`, async () => {
      const split = randomSplit(5);
      const outerOpt = { kind: 'nesterov', lr: 0.7, momentum: 0.9 } as const;
      const sync: RecomputeJob['sync'] = {
        mode: 'local',
        innerSteps: 4,
        outer: outerOpt,
        compression: 'int8',
        overlap: false,
      };
      const rand = mulberry32(8);
      const start = {
        ...randomState(optimizer, 6),
        outer: randomArray(rand, parameterLayout(SPEC).totalElements, -1e-3, 1e-3),
      };
      // Rank 1 of a world of 2: samples in three of the four inner steps, none in one.
      const pick = (k: number) => Uint32Array.from({ length: k }, () => Math.floor(rand() * SAMPLES));
      const mine = [pick(9), pick(12), new Uint32Array(0), pick(7)];
      const steps = mine.map((slice) => ({ slices: [slice], count: 24 }));
      // The reference: the same inner steps in float64.
      let theta: Float64Array<ArrayBufferLike> = Float64Array.from(start.params);
      let m: Float64Array<ArrayBufferLike> = Float64Array.from(start.moments[0]);
      let v: Float64Array<ArrayBufferLike> = Float64Array.from(start.moments[1] ?? []);
      let t = start.optimizer.t;
      for (const slice of mine) {
        if (slice.length === 0) continue;
        const g = referenceGradients(split, theta, slice);
        t += 1;
        if (optimizer.kind === 'adamw')
          ({ params: theta, m, v } = referenceAdamW(theta, g, m, v, { ...optimizer, gradScale: 1 / slice.length, t }));
        else
          ({ params: theta, velocity: m } = referenceSgdMomentum(theta, g, m, {
            ...optimizer,
            weightDecay: 0,
            gradScale: 1 / slice.length,
          }));
      }
      const weight = 28 / 96;
      const delta = start.params.map((c, i) => (c - theta[i]) * weight);
      // The agreed sum: this rank's part and another rank's.
      const sum = f32(delta.map((d, i) => d + 1e-4 * Math.sin(i)));
      const sumSketch = gradientSketch(sum, STEP_HASH, 2);
      const req: RecomputeRequest = {
        snapshot: start,
        stepHash: STEP_HASH,
        world: 2,
        mode: 'local',
        rank: 1,
        steps,
        fresh: false,
        sum: { values: Array.from(sumSketch.values), mass: Array.from(sumSketch.mass) },
      };
      const got = await recomputer(optimizer, split, sync).recompute(req);
      const ownRatio = ratio(got.own[0], gradientSketch(f32(delta), STEP_HASH, 2));
      const refMoments = (optimizer.kind === 'adamw' ? [m, v] : [m]).map((x) => gradientSketch(f32(x), STEP_HASH, 2));
      const momentRatios = got.moments!.map((k, i) => ratio(k, refMoments[i]));
      // The outer step the tabs take with that sum, exactly.
      const u = start.outer.map((x, i) => outerOpt.momentum * x + sum[i]);
      const next = start.params.map((x, i) => x - outerOpt.lr * (sum[i] + outerOpt.momentum * u[i]));
      const outerRatio = ratio(gradientSketch(u, STEP_HASH, 2), got.outer!);
      const paramsRatio = ratio(gradientSketch(next, STEP_HASH, 2), got.params);
      console.log(
        `verifier-recompute local ${optimizer.kind}: own ${ownRatio.toExponential(2)}, moments ${momentRatios.map((r) => r.toExponential(2)).join('/')}, outer ${outerRatio.toExponential(2)}, params ${paramsRatio.toExponential(2)}`,
      );
      for (const r of [ownRatio, ...momentRatios, outerRatio, paramsRatio])
        expect(r).toBeLessThanOrEqual(RECOMPUTE_TOLERANCE / 10);
      expect(got.startOk).toBe(true);
      // A contribution scaled, or another momentum applied, misses by far.
      expect(ratio(gradientSketch(f32(delta.map((d) => 3 * d)), STEP_HASH, 2), got.own[0])).toBeGreaterThan(
        10 * RECOMPUTE_TOLERANCE,
      );
      expect(
        ratio(
          gradientSketch(
            u.map((x) => x * 1.05),
            STEP_HASH,
            2,
          ),
          got.outer!,
        ),
      ).toBeGreaterThan(10 * RECOMPUTE_TOLERANCE);
    });
  }

  it('tells a framing poison from a lie: rounding alone moves its recomputation about as far as an honest rank rounding otherwise lands, a sound state’s not at all', async () => {
    const split = randomSplit(5);
    const outerOpt = { kind: 'nesterov', lr: 0.7, momentum: 0.9 } as const;
    const sync: RecomputeJob['sync'] = {
      mode: 'local',
      innerSteps: 8,
      outer: outerOpt,
      compression: 'int8',
      overlap: false,
    };
    const r = recomputer(ADAMW, split, sync);
    const rand = mulberry32(9);
    const n = parameterLayout(SPEC).totalElements;
    const mine = Array.from({ length: 8 }, () => Uint32Array.from({ length: 12 }, () => Math.floor(rand() * SAMPLES)));
    /**
     * The rank's honest outer step from `params` in float64 (an honest tab on a GPU that rounds
     * otherwise), the verifier's, and the verifier's from the perturbed start (`perturb`).
     */
    const measure = async (params: Float32Array) => {
      const start = { ...randomState(ADAMW, 6), params, outer: new Float32Array(n) };
      let theta: Float64Array<ArrayBufferLike> = Float64Array.from(params);
      let m: Float64Array<ArrayBufferLike> = Float64Array.from(start.moments[0]);
      let v: Float64Array<ArrayBufferLike> = Float64Array.from(start.moments[1]);
      for (const [i, slice] of mine.entries()) {
        const g = referenceGradients(split, theta, slice);
        ({
          params: theta,
          m,
          v,
        } = referenceAdamW(theta, g, m, v, { ...ADAMW, gradScale: 1 / 12, t: start.optimizer.t + i + 1 }));
      }
      const weight = 96 / 192;
      const delta = f32(Array.from(params, (c, i) => (c - theta[i]) * weight));
      const sumSketch = gradientSketch(delta, STEP_HASH, 2);
      const req: RecomputeRequest = {
        snapshot: start,
        stepHash: STEP_HASH,
        world: 2,
        mode: 'local',
        rank: 0,
        steps: mine.map((slice) => ({ slices: [slice], count: 24 })),
        fresh: false,
        sum: { values: Array.from(sumSketch.values), mass: Array.from(sumSketch.mass) },
      };
      const got = await r.recompute(req);
      const again = await r.recompute({ ...req, perturb: true });
      const honest = Math.max(
        ratio(gradientSketch(delta, STEP_HASH, 2), got.own[0]),
        ...[m, v].map((x, i) => ratio(gradientSketch(f32(x), STEP_HASH, 2), got.moments![i])),
      );
      const negated = ratio(gradientSketch(f32(delta.map((d) => -d)), STEP_HASH, 2), got.own[0]);
      return { honest, sensitivity: sensitivityOf('local', got, again), negated };
    };
    const sound = await measure(randomState(ADAMW, 6).params);
    // A poison built to make honest recomputations disagree: every output bias moved by the same large
    // offset. The model's function is unchanged (softmax ignores a common offset), but each logit is now
    // rounded to the offset's ulp, so a last-bit difference in a matrix product moves a logit by that ulp.
    const layout = parameterLayout(SPEC);
    const bias = layout.entries.at(-1)!;
    const params = randomState(ADAMW, 6).params;
    for (let i = bias.offset; i < bias.offset + bias.size; i++) params[i] += OFFSET;
    const poisoned = await measure(params);
    const show = (x: typeof sound) =>
      `honest ${x.honest.toExponential(2)}, sensitivity ${x.sensitivity.toExponential(2)}, negated ${x.negated.toExponential(2)}`;
    console.log(`verifier-recompute framing poison: sound state ${show(sound)}; poisoned state ${show(poisoned)}`);
    // Sound: the margin changes nothing (the limit stays RECOMPUTE_TOLERANCE), a lie is caught.
    expect(SENSITIVITY_MARGIN * sound.sensitivity).toBeLessThan(RECOMPUTE_TOLERANCE);
    expect(sound.negated).toBeGreaterThan(10 * RECOMPUTE_TOLERANCE);
    // Poisoned: an honest rank rounding otherwise misses by more than the tolerance (it would be banned
    // by the tolerance alone), and within the margin: inconclusive. A negated contribution is still a lie.
    expect(poisoned.honest).toBeGreaterThan(RECOMPUTE_TOLERANCE);
    expect(poisoned.honest).toBeLessThanOrEqual(SENSITIVITY_MARGIN * poisoned.sensitivity);
    expect(poisoned.negated).toBeGreaterThan(SENSITIVITY_MARGIN * poisoned.sensitivity);
  });

  it('says whether a commit that started at step 0 started from the fresh state', async () => {
    const split = randomSplit(1);
    const r = recomputer(ADAMW, split);
    const params = await r.initialParams();
    const n = params.length;
    const fresh = {
      params,
      moments: [new Float32Array(n), new Float32Array(n)],
      optimizer: { kind: 'adamw' as const, t: 0 },
    };
    const req: RecomputeRequest = {
      snapshot: fresh,
      stepHash: STEP_HASH,
      world: 3,
      mode: 'every-step',
      steps: [{ slices: slicesOf(2), count: 24 }],
      fresh: true,
    };
    expect((await r.recompute(req)).startOk).toBe(true);
    const nudged = params.slice();
    nudged[3] += 1e-3;
    expect((await r.recompute({ ...req, snapshot: { ...fresh, params: nudged } })).startOk).toBe(false);
    expect((await r.recompute({ ...req, snapshot: { ...fresh, optimizer: { kind: 'adamw', t: 1 } } })).startOk).toBe(
      false,
    );
  });

  it('refuses a bad request before touching the state, and serves the next one', async () => {
    const split = randomSplit(1);
    const r = recomputer(ADAMW, split);
    const good: RecomputeRequest = {
      snapshot: randomState(ADAMW, 3),
      stepHash: STEP_HASH,
      world: 3,
      mode: 'every-step',
      steps: [{ slices: slicesOf(2), count: 24 }],
      fresh: false,
    };
    const first = await r.recompute(good);
    const slices = slicesOf(2);
    const bad: Partial<RecomputeRequest>[] = [
      { steps: [{ slices, count: 23 }] },
      { world: 2 },
      { stepHash: 'not-a-hash' },
      { steps: [{ slices: [Uint32Array.of(SAMPLES), new Uint32Array(0), new Uint32Array(0)], count: 1 }] },
      { snapshot: randomState(SGD, 3) },
      { mode: 'local', rank: 0 },
      {
        steps: [
          { slices, count: 24 },
          { slices, count: 24 },
        ],
      },
    ];
    for (const change of bad) await expect(r.recompute({ ...good, ...change })).rejects.toThrow();
    await expect(r.recompute({ ...good, steps: [{ slices, count: 23 }] })).rejects.toBeInstanceOf(RecomputeError);
    const again = await r.recompute(good);
    expect(again.paramsHash).toBe(first.paramsHash);
  });
});
