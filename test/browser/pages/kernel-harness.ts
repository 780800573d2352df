/**
 * Test harness page for the kernels in Chromium's own WebGPU (not the Node Dawn build): exposes
 * `window.kernelHarness` so a Playwright test can run one transformer step in the page and read plain
 * numbers back (initial parameters, loss, every gradient), and run every autotuner candidate's step
 * against the default kernels' bits (`variantSteps`).
 */
import {
  isTransformer,
  parameterLayout,
  type ModelSpec,
  type TransformerSpec,
} from '../../../core/training/model-spec';
import { createModel } from '../../../kernels/model/model';
import type { Precision } from '../../../kernels/model/model-graph';
import { createGpu, kernelDeviceDescriptor, type Gpu } from '../../../kernels/runtime';
import { candidates, FAMILIES, variantName, type Family, type KernelVariants } from '../../../kernels/tuning/variants';

export interface TransformerStepResult {
  adapter: string;
  params: number[];
  lossSum: number;
  gradients: number[];
  /** The gradients of a second identical step are the same bits. */
  repeatIdentical: boolean;
}

async function transformerStep(args: {
  spec: TransformerSpec;
  seed: number;
  windows: number[];
  batch: number;
}): Promise<TransformerStepResult> {
  const adapter = await navigator.gpu?.requestAdapter();
  if (!adapter) throw new Error('no WebGPU adapter in this page');
  const gpu = createGpu(await adapter.requestDevice());
  const model = createModel(gpu, args.spec, parameterLayout(args.spec), {
    maxBatch: args.batch,
    seed: args.seed,
    optimizer: { kind: 'adamw', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1 },
  });
  const windows = Uint32Array.from(args.windows);
  const params = Array.from(await model.readParams());
  model.forwardBackwardTokens(windows, args.batch);
  const lossSum = await model.readLossSum();
  const gradients = await model.readGradients();
  model.forwardBackwardTokens(windows, args.batch);
  const again = await model.readGradients();
  model.destroy();
  const repeatIdentical = again.every((v, i) => Object.is(v, gradients[i]));
  const info = adapter.info;
  return {
    adapter: `${info?.vendor ?? ''} ${info?.architecture ?? ''} ${info?.description ?? ''}`.trim(),
    params,
    lossSum,
    gradients: Array.from(gradients),
    repeatIdentical,
  };
}

let variantGpu: Promise<Gpu> | undefined;
/** A device with the optional features the variants use (subgroups), as the training worker opens it. */
function featureGpu(): Promise<Gpu> {
  variantGpu ??= (async () => {
    const adapter = await navigator.gpu?.requestAdapter();
    if (!adapter) throw new Error('no WebGPU adapter in this page');
    return createGpu(await adapter.requestDevice(kernelDeviceDescriptor(adapter, 'variants')));
  })();
  return variantGpu;
}

export interface VariantStepsResult {
  features: { subgroups: boolean; shaderF16: boolean };
  /** `family variant` of every candidate run. */
  ran: string[];
  /** Those whose step differed from the default's in any bit (must stay empty). */
  differing: string[];
  /** The default kernels' gradient sums of the step (for a float64 comparison in Node). */
  gradients: number[];
  lossSum: number;
}

/** One step's gradient, loss and post-optimizer parameter bits of `spec` with `variants`, on a seeded batch. */
async function stepBits(
  gpu: Gpu,
  spec: ModelSpec,
  batch: number,
  precision: Precision,
  variants?: Partial<KernelVariants>,
) {
  const model = createModel(gpu, spec, parameterLayout(spec), {
    maxBatch: batch,
    seed: 5,
    precision,
    variants,
    optimizer: { kind: 'adamw', lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 },
  });
  const inputs = isTransformer(spec) ? batch * (spec.context + 1) : batch * spec.input.reduce((a, b) => a * b, 1);
  let state = 17;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 4294967296;
  };
  if (isTransformer(spec))
    model.forwardBackwardTokens(
      Uint32Array.from({ length: inputs }, () => Math.floor(next() * spec.vocab)),
      batch,
    );
  else
    model.forwardBackward(
      Float32Array.from({ length: inputs }, next),
      Uint32Array.from({ length: batch }, () => Math.floor(next() * spec.classes)),
      batch,
    );
  const grads = await model.readGradients();
  const loss = await model.readLossSum();
  model.applyOptimizer(batch);
  const params = await model.readParams();
  model.destroy();
  return {
    grads,
    loss,
    bits: [
      ...new Uint32Array(grads.buffer),
      new Uint32Array(Float32Array.of(loss).buffer)[0],
      ...new Uint32Array(params.buffer),
    ],
  };
}

/** Every candidate of every family against the default kernels' step bits, in this page's WebGPU. */
async function variantSteps(args: {
  spec: ModelSpec;
  batch: number;
  precision: Precision;
  /** The families the model has kernels of (a family it lacks would run nothing new). */
  families: Family[];
}): Promise<VariantStepsResult> {
  const gpu = await featureGpu();
  const base = await stepBits(gpu, args.spec, args.batch, args.precision);
  const ran: string[] = [];
  const differing: string[] = [];
  for (const family of FAMILIES.filter((f) => args.families.includes(f))) {
    for (const v of candidates(gpu, family).slice(1)) {
      const name = `${family} ${variantName(family, v)}`;
      const got = await stepBits(gpu, args.spec, args.batch, args.precision, { [family]: v });
      ran.push(name);
      if (got.bits.length !== base.bits.length || got.bits.some((b, i) => b !== base.bits[i])) differing.push(name);
    }
  }
  return { features: gpu.features, ran, differing, gradients: Array.from(base.grads), lossSum: base.loss };
}

const harness = { transformerStep, variantSteps };
export type KernelHarness = typeof harness;
declare global {
  interface Window {
    kernelHarness: KernelHarness;
  }
}
window.kernelHarness = harness;
