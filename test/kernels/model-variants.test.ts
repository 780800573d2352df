/**
 * Every autotuner candidate of every op family (kernels/tuning/variants.ts) inside a whole model: one
 * training step — gradient sums, loss, and the parameters after an optimizer step — must have the
 * default kernels' bits. The default kernels are checked against the float64 references and finite
 * differences by the op tests and model.test.ts, so a candidate with the same bits passes them too.
 * Also the f16 mode: mlp's step against a float64 reference that rounds the dense operands to halves,
 * a small GPT's against float32, with the same bits for every matmul tile.
 */
import { describe, expect, it } from 'vitest';
import { CNN_SPEC, isTransformer, MLP_SPEC, parameterLayout, type ModelSpec } from '../../core/training/model-spec';
import type { OptimizerConfig } from '../../kernels/model/flat-optimizer';
import { createModel } from '../../kernels/model/model';
import type { Precision } from '../../kernels/model/model-graph';
import type { Gpu } from '../../kernels/runtime';
import {
  candidates,
  DEFAULT_VARIANTS,
  variantName,
  type Family,
  type KernelVariants,
} from '../../kernels/tuning/variants';
import { initParams } from '../../kernels/model/layers';
import { expectClose } from '../support/compare';
import { expectScalarClose, expectTensorsClose, referenceForwardBackward } from '../support/reference-model';
import { nodeGpu } from '../support/node-gpu';
import { mulberry32 } from '../support/rng';
import { expectSameBits, nearestHalf, reportVariants, SMALL_GPT } from '../support/variants';

const ADAMW: OptimizerConfig = { kind: 'adamw', lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 };
const SGD: OptimizerConfig = { kind: 'sgd', lr: 0.05, momentum: 0.9, weightDecay: 1e-4 };

interface Step {
  grads: Float32Array;
  loss: Float32Array;
  params: Float32Array;
}

/** One step of `spec` with `variants` on a seeded batch of `batch` samples. */
async function step(
  gpu: Gpu,
  spec: ModelSpec,
  batch: number,
  opts: { variants?: Partial<KernelVariants>; precision?: Precision; optimizer?: OptimizerConfig } = {},
): Promise<Step> {
  const model = createModel(gpu, spec, parameterLayout(spec), {
    maxBatch: batch,
    seed: 5,
    optimizer: opts.optimizer ?? ADAMW,
    variants: opts.variants,
    precision: opts.precision,
  });
  const rand = mulberry32(17);
  if (isTransformer(spec)) {
    const windows = Uint32Array.from({ length: batch * (spec.context + 1) }, () => Math.floor(rand() * spec.vocab));
    model.forwardBackwardTokens(windows, batch);
  } else {
    const pixels = spec.input.reduce((a, b) => a * b, 1);
    const x = Float32Array.from({ length: batch * pixels }, rand);
    model.forwardBackward(
      x,
      Uint32Array.from({ length: batch }, () => Math.floor(rand() * spec.classes)),
      batch,
    );
  }
  const grads = await model.readGradients();
  const loss = Float32Array.of(await model.readLossSum());
  model.applyOptimizer(batch);
  const params = await model.readParams();
  model.destroy();
  return { grads, loss, params };
}

function expectSameStep(got: Step, want: Step, label: string): void {
  expectSameBits(got.grads, want.grads, `${label}: gradients`);
  expectSameBits(got.loss, want.loss, `${label}: loss`);
  expectSameBits(got.params, want.params, `${label}: parameters after the optimizer`);
}

/** Every candidate of `family` in `spec`'s step against the default's bits; returns the names run. */
async function checkFamily(
  gpu: Gpu,
  family: Family,
  spec: ModelSpec,
  batch: number,
  optimizer = ADAMW,
): Promise<string[]> {
  const base = await step(gpu, spec, batch, { optimizer });
  const ran: string[] = [];
  for (const v of candidates(gpu, family)) {
    const name = variantName(family, v);
    expectSameStep(await step(gpu, spec, batch, { variants: { [family]: v }, optimizer }), base, `${family} ${name}`);
    ran.push(name);
  }
  return ran;
}

describe('kernel variants in a model step', () => {
  it('every conv2d candidate gives the default’s step bits (cnn)', async () => {
    const gpu = await nodeGpu();
    reportVariants('conv2d', await checkFamily(gpu, 'conv2d', CNN_SPEC, 3));
  });

  it('every attention and LayerNorm candidate gives the default’s step bits (a small GPT)', async () => {
    const gpu = await nodeGpu();
    reportVariants('attention', await checkFamily(gpu, 'attention', SMALL_GPT, 3));
    const quads = gpu.features.subgroups ? [] : [{ name: 'quads (every workgroup size)', feature: 'subgroups' }];
    reportVariants('layernorm', await checkFamily(gpu, 'layernorm', SMALL_GPT, 3), quads);
  });

  it('every optimizer candidate gives the default’s bits with AdamW and with SGD (mlp)', async () => {
    const gpu = await nodeGpu();
    reportVariants('optimizer (AdamW)', await checkFamily(gpu, 'optimizer', MLP_SPEC, 4));
    reportVariants('optimizer (SGD)', await checkFamily(gpu, 'optimizer', MLP_SPEC, 4, SGD));
  });

  it('the f16 mode of mlp computes the float64 reference of its half-rounded dense operands', async () => {
    const gpu = await nodeGpu();
    const batch = 8;
    const layout = parameterLayout(MLP_SPEC);
    const model = createModel(gpu, MLP_SPEC, layout, { maxBatch: batch, seed: 5, optimizer: ADAMW, precision: 'f16' });
    const rand = mulberry32(17);
    const x = Float32Array.from({ length: batch * 784 }, rand);
    const labels = Uint32Array.from({ length: batch }, () => Math.floor(rand() * 10));
    model.forwardBackward(x, labels, batch);
    const grads = await model.readGradients();
    const loss = await model.readLossSum();
    model.destroy();
    const init = initParams(MLP_SPEC, layout, 5);
    const ref = referenceForwardBackward(MLP_SPEC, layout, init, x, labels, batch, { roundDenseOperands: nearestHalf });
    expectScalarClose(loss, ref.lossSum, 1e-4, 'f16 loss');
    expectTensorsClose(grads, ref.grads, layout, { rtol: 1e-4, label: 'f16 gradient sums' });
    // What the halves change, for the record: the same step in float32 (the f32 reference).
    const exact = referenceForwardBackward(MLP_SPEC, layout, init, x, labels, batch);
    const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((sum, g) => sum + g * g, 0));
    const moved = norm(ref.grads.map((g, i) => g - exact.grads[i])) / norm(exact.grads);
    console.log(`[variants] mlp f16: gradients ${moved.toExponential(2)} (relative) from the float32 step`);
  });

  it('the f16 mode of a small GPT stays near float32, with the same bits for every matmul tile', async () => {
    const gpu = await nodeGpu();
    const f32 = await step(gpu, SMALL_GPT, 3);
    const f16 = await step(gpu, SMALL_GPT, 3, { precision: 'f16' });
    const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((sum, x) => sum + x * x, 0));
    const relative = norm(f16.grads.map((g, i) => g - f32.grads[i])) / norm(f32.grads);
    console.log(
      `[variants] ${SMALL_GPT.name} f16: loss ${f16.loss[0]} vs ${f32.loss[0]}, gradients ${relative.toExponential(2)} (relative) from float32`,
    );
    // Halves carry 11 significant bits (2^-11 ≈ 4.9e-4 relative per operand); measured 3e-4 here.
    expectClose(f16.loss, f32.loss, { atol: 0, rtol: 1e-3, label: 'f16 loss' });
    expect(relative).toBeGreaterThan(0);
    expect(relative).toBeLessThan(5e-3);
    const tiles = candidates(gpu, 'matmul') as KernelVariants['matmul'][];
    for (const tile of tiles.filter((t) => t !== DEFAULT_VARIANTS.matmul).slice(0, 3)) {
      const got = await step(gpu, SMALL_GPT, 3, { precision: 'f16', variants: { matmul: tile } });
      expectSameStep(got, f16, `f16 ${variantName('matmul', tile)}`);
    }
  });
});
