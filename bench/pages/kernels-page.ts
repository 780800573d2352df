/**
 * The in-browser half of `npm run bench:kernels`: our kernels and TF.js's WebGPU backend, side by
 * side on the same adapter in one page (each side on its own GPUDevice, both on the main thread).
 * bench/kernels.ts decides what to run and in which order (it alternates the sides); this page only
 * prepares, warms up and times single samples through `window.kernelBench`.
 *
 * How a sample waits for the GPU, the same way on both sides and with NO read-back in the timed region:
 * - ours: the calls are submitted, then `device.queue.onSubmittedWorkDone()`;
 * - TF.js: its ops record into the backend's pending command encoder (submitted every 15 dispatches),
 *   so the sample ends by submitting what is pending and awaiting `onSubmittedWorkDone()` of the
 *   backend's queue. Result tensors are disposed after the wait.
 * Read-backs happen only in setup, to check both sides compute the same thing.
 */
import * as tf from '@tensorflow/tfjs';
import '@tensorflow/tfjs-backend-webgpu';
import type { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { GPT_TINY_SPEC, MLP_SPEC, parameterLayout } from '../../core/training/model-spec';
import { DEFAULT_MATMUL_TILE, matmul } from '../../kernels/ops/matmul';
import { createModel, initParams, type Model } from '../../kernels/model/model';
import {
  createGpu,
  createTensor,
  readTensor,
  submitCalls,
  writeTensor,
  type Gpu,
  type KernelCall,
  type Tensor,
} from '../../kernels/runtime';
import { interleavedMatmul } from './interleaved-matmul';
import { autotune, type TuningResult } from '../../kernels/tuning/autotune';
import { DEFAULT_VARIANTS, sameVariant } from '../../kernels/tuning/variants';
import { tfLoss } from '../../test/support/reference-transformer-tfjs';
import { mulberry32, randomArray } from '../../test/support/rng';
import type {
  AdapterReport,
  KernelBenchApi,
  MatmulSetupReport,
  MatmulVariantSpec,
  Side,
  TfjsForm,
  TrainOptions,
  TrainSetupReport,
  TransformerSetupReport,
} from './kernel-bench-api';

let gpu: Gpu | undefined;

function ourGpu(): Gpu {
  if (!gpu) throw new Error('kernelBench.init() has not run');
  return gpu;
}

function tfjsBackend(): WebGPUBackend {
  if (tf.getBackend() !== 'webgpu') throw new Error(`TF.js backend is ${tf.getBackend()}, not webgpu`);
  return tf.backend() as WebGPUBackend;
}

/** Submit whatever TF.js has recorded but not submitted, and wait until its queue is idle. */
function tfjsDrain(): Promise<void> {
  const backend = tfjsBackend();
  backend.ensureCommandEncoderReady();
  backend.endComputePassEncoder();
  backend.submitQueue();
  return backend.queue.onSubmittedWorkDone();
}

async function init(): Promise<AdapterReport> {
  if (!navigator.gpu) throw new Error('navigator.gpu is missing: this Chromium has no WebGPU');
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) throw new Error('no WebGPU adapter');
  // The limits TF.js asks for on the same adapter, so neither side runs under tighter ones.
  const device = await adapter.requestDevice({
    label: 'bench.ours',
    requiredLimits: {
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxBufferSize: adapter.limits.maxBufferSize,
      maxComputeWorkgroupStorageSize: adapter.limits.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: adapter.limits.maxComputeInvocationsPerWorkgroup,
      maxComputeWorkgroupSizeX: adapter.limits.maxComputeWorkgroupSizeX,
      maxComputeWorkgroupSizeY: adapter.limits.maxComputeWorkgroupSizeY,
    },
  });
  device.addEventListener('uncapturederror', (e) =>
    console.error(`WebGPU error (ours): ${(e as GPUUncapturedErrorEvent).error.message}`),
  );
  gpu = createGpu(device);

  if (!(await tf.setBackend('webgpu'))) throw new Error('TF.js could not initialise its webgpu backend');
  await tf.ready();
  const tfInfo = tfjsBackend().adapterInfo as unknown as { vendor: string; architecture: string };
  const info = adapter.info;
  return {
    vendor: info.vendor,
    architecture: info.architecture,
    device: info.device,
    description: info.description,
    userAgent: navigator.userAgent,
    tfjsAdapter: { vendor: tfInfo.vendor, architecture: tfInfo.architecture },
    tfjsVersion: tf.version.tfjs,
    defaultTile: { ...DEFAULT_MATMUL_TILE },
  };
}

// ---------------------------------------------------------------------------------------------- matmul

interface MatmulState {
  n: number;
  ours: { a: Tensor; b: Tensor; out: Tensor; calls: KernelCall[] };
  tfjs: { a: tf.Tensor2D; b: tf.Tensor2D };
}

let mm: MatmulState | undefined;

function runOurs(calls: readonly KernelCall[], runs: number): Promise<void> {
  const g = ourGpu();
  // One submission per product, like TF.js (which submits at least every 15 dispatches).
  for (let r = 0; r < runs; r++) submitCalls(g, calls, 'bench.matmul');
  return g.device.queue.onSubmittedWorkDone();
}

async function runTfjsMatmul(state: MatmulState, runs: number): Promise<void> {
  const outs: tf.Tensor[] = [];
  for (let r = 0; r < runs; r++) outs.push(tf.matMul(state.tfjs.a, state.tfjs.b));
  await tfjsDrain();
  for (const t of outs) t.dispose();
}

async function matmulSetup(n: number, variants: MatmulVariantSpec[]): Promise<MatmulSetupReport> {
  await matmulTeardown();
  const g = ourGpu();
  const rand = mulberry32(n);
  const aData = randomArray(rand, n * n);
  const bData = randomArray(rand, n * n);
  const a = createTensor(g, [n, n], 'bench.a', aData);
  const b = createTensor(g, [n, n], 'bench.b', bData);
  const out = createTensor(g, [n, n], 'bench.out');
  const dims = { m: n, n, k: n };
  const calls = variants.map(({ tile, interleaved }) =>
    interleaved ? interleavedMatmul(g, { a, b, out }, dims, tile) : matmul(g, { a, b, out }, dims, { tile }).call,
  );
  const state: MatmulState = {
    n,
    ours: { a, b, out, calls },
    tfjs: { a: tf.tensor2d(aData, [n, n]), b: tf.tensor2d(bData, [n, n]) },
  };
  mm = state;

  // Warm-up (pipeline compilation, TF.js's upload of the operands) doubles as the correctness check.
  const reference = tf.matMul(state.tfjs.a, state.tfjs.b);
  const want = (await reference.data()) as Float32Array;
  reference.dispose();
  let scale = 0;
  for (const v of want) scale = Math.max(scale, Math.abs(v));
  const relativeDiff: number[] = [];
  for (const call of calls) {
    // Poison the output first, so a variant that skips some of it cannot inherit the previous one's.
    writeTensor(g, out, new Float32Array(n * n).fill(Number.NaN));
    await runOurs([call], 1);
    const got = await readTensor(g, out);
    let diff = 0;
    for (let i = 0; i < want.length; i++) diff = Math.max(diff, Math.abs(got[i] - want[i]));
    relativeDiff.push(diff / scale);
  }
  return { n, relativeDiff };
}

async function matmulTime(side: Side, runs: number): Promise<number> {
  const state = mm;
  if (!state) throw new Error('matmulSetup() has not run');
  const t0 = performance.now();
  if (side.side === 'ours') {
    const call = state.ours.calls[side.variant];
    if (!call) throw new Error(`no matmul variant ${side.variant}`);
    await runOurs([call], runs);
  } else {
    await runTfjsMatmul(state, runs);
  }
  return performance.now() - t0;
}

async function matmulTeardown(): Promise<void> {
  const state = mm;
  mm = undefined;
  if (!state) return;
  await ourGpu().device.queue.onSubmittedWorkDone();
  for (const t of [state.ours.a, state.ours.b, state.ours.out]) t.buffer.destroy();
  state.tfjs.a.dispose();
  state.tfjs.b.dispose();
}

// ------------------------------------------------------------------------------------ training step

interface TfjsMlp {
  weights: { w: tf.Variable; b: tf.Variable; relu: boolean }[];
  optimizer: tf.AdamOptimizer;
  form: TfjsForm;
}

interface TrainState {
  batch: number;
  x: Float32Array;
  labels: Uint32Array;
  oneHot: Float32Array;
  ours: Model[];
  tfjs: TfjsMlp[];
}

let train: TrainState | undefined;

// Adam on both sides: ours is AdamW with weight decay 0. TF.js's default epsilon is 1e-7; use ours.
const LR = 1e-3;
const BETA1 = 0.9;
const BETA2 = 0.999;
const EPS = 1e-8;

/** The same mlp as ours, from the same flat initial parameters. */
function buildTfjsMlp(params: Float32Array, form: TfjsForm): TfjsMlp {
  const layout = parameterLayout(MLP_SPEC);
  const weights = MLP_SPEC.layers.map((layer, i) => {
    if (layer.type !== 'dense') throw new Error('the bench mlp has dense layers only');
    const entry = (kind: 'weight' | 'bias') => {
      const e = layout.entries.find((en) => en.layer === i && en.kind === kind);
      if (!e) throw new Error(`no ${kind} for layer ${i}`);
      return tf.variable(
        tf.tensor(params.slice(e.offset, e.offset + e.size), e.shape),
        true,
        `bench.${form}.${e.name}`,
      );
    };
    return { w: entry('weight'), b: entry('bias'), relu: layer.activation === 'relu' };
  });
  return { weights, optimizer: tf.train.adam(LR, BETA1, BETA2, EPS), form };
}

/** Mean softmax cross-entropy of the TF.js mlp on (xs, ys); built inside the caller's tape/tidy. */
function tfjsLoss(model: TfjsMlp, xs: tf.Tensor2D, ys: tf.Tensor2D): tf.Scalar {
  let h: tf.Tensor2D = xs;
  for (const { w, b, relu } of model.weights) {
    if (model.form === 'plain') {
      const z = tf.add(tf.matMul(h, w as tf.Tensor2D), b) as tf.Tensor2D;
      h = relu ? tf.relu(z) : z;
    } else {
      h = tf.fused.matMul({ a: h, b: w as tf.Tensor2D, bias: b, activation: relu ? 'relu' : 'linear' }) as tf.Tensor2D;
    }
  }
  return tf.losses.softmaxCrossEntropy(ys, h) as tf.Scalar;
}

/** One TF.js step: upload the batch (as ours does), forward, backward, Adam; nothing read back. */
function tfjsStep(state: TrainState, tfjs: TfjsMlp): void {
  const { batch, x, oneHot } = state;
  tf.tidy(() => {
    const xs = tf.tensor2d(x, [batch, 784]);
    const ys = tf.tensor2d(oneHot, [batch, 10]);
    tfjs.optimizer.minimize(() => tfjsLoss(tfjs, xs, ys), false);
  });
}

function oursStep(state: TrainState, model: Model): void {
  model.trainStep(state.x, state.labels, state.batch);
}

async function trainSetup(batch: number, options: TrainOptions): Promise<TrainSetupReport> {
  await trainTeardown();
  const g = ourGpu();
  const layout = parameterLayout(MLP_SPEC);
  const params = initParams(MLP_SPEC, layout, 1);
  const rand = mulberry32(batch);
  const x = randomArray(rand, batch * 784, 0, 1);
  const labels = Uint32Array.from({ length: batch }, () => Math.floor(rand() * 10));
  const oneHot = new Float32Array(batch * 10);
  labels.forEach((label, i) => {
    oneHot[i * 10 + label] = 1;
  });
  const optimizer = { kind: 'adamw', lr: LR, beta1: BETA1, beta2: BETA2, eps: EPS, weightDecay: 0 } as const;
  const ours = options.tiles.map((tile) =>
    createModel(g, MLP_SPEC, layout, {
      maxBatch: batch,
      optimizer,
      params,
      ...(tile ? { variants: { matmul: tile } } : {}),
    }),
  );
  let tuned: TuningResult | undefined;
  if (options.autotuneMs > 0) {
    const request = { spec: MLP_SPEC, layout, maxBatch: batch, optimizer, precision: 'f32' as const };
    tuned = await autotune(g, { ...request, budgetMs: options.autotuneMs });
    ours.push(createModel(g, MLP_SPEC, layout, { maxBatch: batch, optimizer, params, variants: tuned.variants }));
  }
  const state: TrainState = {
    batch,
    x,
    labels,
    oneHot,
    ours,
    tfjs: options.tfjsForms.map((form) => buildTfjsMlp(params, form)),
  };
  train = state;

  // Same weights, same batch: the losses before any step must agree (else the bench compares different models).
  const lossOurs: number[] = [];
  for (const model of ours) {
    model.forwardBackward(x, labels, batch);
    lossOurs.push((await model.readLossSum()) / batch);
  }
  const lossTfjs: number[] = [];
  for (const model of state.tfjs) {
    const lossTensor = tf.tidy(() => tfjsLoss(model, tf.tensor2d(x, [batch, 784]), tf.tensor2d(oneHot, [batch, 10])));
    lossTfjs.push((await lossTensor.data())[0]);
    lossTensor.dispose();
  }

  // Warm-up: compile every pipeline, create Adam's moments on the TF.js side.
  for (let i = 0; i < 2; i++) {
    for (const model of ours) {
      oursStep(state, model);
      await g.device.queue.onSubmittedWorkDone();
    }
    for (const model of state.tfjs) {
      tfjsStep(state, model);
      await tfjsDrain();
    }
  }
  const choice = tuned ? { autotuned: choiceNames(tuned), autotunedIsDefault: keptDefaults(tuned) } : {};
  return { batch, lossOurs, lossTfjs, ...choice };
}

function keptDefaults(r: TuningResult): boolean {
  return sameVariant(r.variants, DEFAULT_VARIANTS);
}

/** The tuner's choice, one `family variant` per family it tuned. */
function choiceNames(r: TuningResult): string[] {
  return r.families.map((f) => `${f.family} ${f.chosen}`);
}

async function trainTime(side: Side, steps: number): Promise<number> {
  const state = train;
  if (!state) throw new Error('trainSetup() has not run');
  const t0 = performance.now();
  if (side.side === 'ours') {
    const model = state.ours[side.variant];
    if (!model) throw new Error(`no model for tile ${side.variant}`);
    for (let s = 0; s < steps; s++) oursStep(state, model);
    await ourGpu().device.queue.onSubmittedWorkDone();
  } else {
    const model = state.tfjs[side.variant];
    if (!model) throw new Error(`no TF.js model ${side.variant}`);
    for (let s = 0; s < steps; s++) tfjsStep(state, model);
    await tfjsDrain();
  }
  return performance.now() - t0;
}

async function trainTeardown(): Promise<void> {
  const state = train;
  train = undefined;
  if (!state) return;
  await ourGpu().device.queue.onSubmittedWorkDone();
  for (const model of state.ours) model.destroy();
  for (const model of state.tfjs) {
    for (const { w, b } of model.weights) {
      w.dispose();
      b.dispose();
    }
    model.optimizer.dispose();
  }
}

/** The Model's prepared calls in step order: private fields, read here only for the breakdown probe. */
interface ModelInternals {
  forwardCalls: KernelCall[];
  lossCall: KernelCall;
  backwardCalls: KernelCall[];
  optimizerKernel: { call: KernelCall };
}

async function trainBreakdown(
  variant: number,
  reps: number,
): Promise<{ label: string; workgroups: number[]; ms: number }[]> {
  const state = train;
  if (!state) throw new Error('trainSetup() has not run');
  const model = state.ours[variant];
  if (!model) throw new Error(`no model for tile ${variant}`);
  const internals = model as unknown as ModelInternals;
  const calls = [
    ...internals.forwardCalls,
    internals.lossCall,
    ...internals.backwardCalls,
    internals.optimizerKernel.call,
  ];
  if (calls.some((c) => !c?.pipeline)) throw new Error('Model internals changed: update trainBreakdown');
  const g = ourGpu();
  model.setBatch(state.x, state.labels, state.batch);
  const result: { label: string; workgroups: number[]; ms: number }[] = [];
  for (const call of calls) {
    const times: number[] = [];
    for (let r = 0; r < reps; r++) {
      const t0 = performance.now();
      submitCalls(g, [call], 'bench.breakdown');
      await g.device.queue.onSubmittedWorkDone();
      times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    result.push({ label: call.label, workgroups: [...call.workgroups], ms: times[times.length >> 1] });
  }
  return result;
}

// ----------------------------------------------------------------------------- transformer training step

interface TransformerState {
  batch: number;
  windows: Uint32Array;
  /** The default kernels (variant 0) and the autotuner's choice (variant 1). */
  ours: Model[];
  tfjs: { variables: Record<string, tf.Variable>; optimizer: tf.AdamOptimizer };
}

let transformer: TransformerState | undefined;

/**
 * One TF.js step of the same model: the windows uploaded (inside tfLoss, as ours uploads them), forward,
 * the mean loss over the batch (ours divides the summed gradients by the batch), backward, Adam.
 */
function tfjsTransformerStep(state: TransformerState): void {
  const { variables, optimizer } = state.tfjs;
  tf.tidy(() => {
    optimizer.minimize(
      () => tf.div(tfLoss(GPT_TINY_SPEC, variables, state.windows, state.batch), state.batch) as tf.Scalar,
      false,
    );
  });
}

async function transformerSetup(batch: number, autotuneMs: number): Promise<TransformerSetupReport> {
  await transformerTeardown();
  const g = ourGpu();
  const spec = GPT_TINY_SPEC;
  const layout = parameterLayout(spec);
  const params = initParams(spec, layout, 1);
  const rand = mulberry32(1000 + batch);
  const windows = Uint32Array.from({ length: batch * (spec.context + 1) }, () => Math.floor(rand() * spec.vocab));
  const optimizer = { kind: 'adamw', lr: LR, beta1: BETA1, beta2: BETA2, eps: EPS, weightDecay: 0 } as const;
  const tuned = await autotune(g, { spec, layout, maxBatch: batch, optimizer, precision: 'f32', budgetMs: autotuneMs });
  const ours = [undefined, tuned.variants].map((variants) =>
    createModel(g, spec, layout, { maxBatch: batch, optimizer, params, variants }),
  );
  const variables: Record<string, tf.Variable> = {};
  for (const e of layout.entries)
    variables[e.name] = tf.variable(
      tf.tensor(params.slice(e.offset, e.offset + e.size), e.shape),
      true,
      `gpt.${e.name}`,
    );
  const state: TransformerState = {
    batch,
    windows,
    ours,
    tfjs: { variables, optimizer: tf.train.adam(LR, BETA1, BETA2, EPS) },
  };
  transformer = state;

  ours[0].forwardBackwardTokens(windows, batch);
  const lossOurs = (await ours[0].readLossSum()) / batch;
  const lossTensor = tf.tidy(() => tfLoss(spec, variables, windows, batch));
  const lossTfjs = (await lossTensor.data())[0] / batch;
  lossTensor.dispose();

  // Warm-up: compile every pipeline, create Adam's moments on the TF.js side.
  for (const model of ours) model.trainTokens(windows, batch);
  await g.device.queue.onSubmittedWorkDone();
  tfjsTransformerStep(state);
  await tfjsDrain();
  const choice = { autotuned: choiceNames(tuned), autotunedIsDefault: keptDefaults(tuned) };
  return { batch, context: spec.context, lossOurs, lossTfjs, ...choice };
}

async function transformerTime(side: Side, steps: number): Promise<number> {
  const state = transformer;
  if (!state) throw new Error('transformerSetup() has not run');
  const t0 = performance.now();
  if (side.side === 'ours') {
    for (let s = 0; s < steps; s++) state.ours[side.variant].trainTokens(state.windows, state.batch);
    await ourGpu().device.queue.onSubmittedWorkDone();
  } else {
    for (let s = 0; s < steps; s++) tfjsTransformerStep(state);
    await tfjsDrain();
  }
  return performance.now() - t0;
}

async function transformerTeardown(): Promise<void> {
  const state = transformer;
  transformer = undefined;
  if (!state) return;
  await ourGpu().device.queue.onSubmittedWorkDone();
  for (const model of state.ours) model.destroy();
  for (const v of Object.values(state.tfjs.variables)) v.dispose();
  state.tfjs.optimizer.dispose();
}

const api: KernelBenchApi = {
  init,
  matmulSetup,
  matmulTime,
  matmulTeardown,
  trainSetup,
  trainTime,
  trainTeardown,
  trainBreakdown,
  transformerSetup,
  transformerTime,
  transformerTeardown,
};
window.kernelBench = api;
