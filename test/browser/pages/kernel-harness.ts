/**
 * Test harness page for the kernels in Chromium's own WebGPU (not the Node Dawn build): exposes
 * `window.kernelHarness` so a Playwright test can run one transformer step in the page and read plain
 * numbers back (initial parameters, loss, every gradient).
 */
import { parameterLayout, type TransformerSpec } from '../../../core/training/model-spec';
import { createModel } from '../../../kernels/model/model';
import { createGpu } from '../../../kernels/runtime';

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

const harness = { transformerStep };
export type KernelHarness = typeof harness;
declare global {
  interface Window {
    kernelHarness: KernelHarness;
  }
}
window.kernelHarness = harness;
