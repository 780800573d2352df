/**
 * bench:gpu's model part: a training step (upload, forward, loss, backward, AdamW; one submission) of
 * `mlp`, `cnn` and `gpt-tiny` with our kernels in four forms — the default variants and the autotuner's
 * choice for this adapter (kernels/tuning/autotune.ts, with its budget), each in float32 and in the f16
 * mode — and the same model in TF.js's WebGPU backend on the same adapter (`optimizer.minimize` with
 * Adam; gpt-tiny is test/support/reference-transformer-tfjs.ts, the stacks are built here from the
 * spec). Both sides start from the same parameters and batch; their initial losses must agree within
 * 1e-3 (relative), or the bench stops: it would compare different models. Samples alternate between the
 * sides; each waits for its queue to be idle (no read-back); figures are medians.
 */
import * as tf from '@tensorflow/tfjs';
import type { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import {
  isTransformer,
  parameterLayout,
  resolveModelSpec,
  type ModelSpec,
  type ParamLayout,
  type SequentialSpec,
} from '../../core/training/model-spec';
import { createModel, initParams, type Model } from '../../kernels/model/model';
import type { Precision } from '../../kernels/model/model-graph';
import type { Gpu } from '../../kernels/runtime';
import { autotune, type SyntheticBatch, syntheticBatch, type TuningResult } from '../../kernels/tuning/autotune';
import { DEFAULT_VARIANTS, sameVariant, type KernelVariants } from '../../kernels/tuning/variants';
import { tfLoss } from '../../test/support/reference-transformer-tfjs';

const ADAMW = { kind: 'adamw', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 } as const;

export interface ModelRow {
  model: string;
  batch: number;
  /** Milliseconds per step (median). */
  default_f32: number;
  tuned_f32: number;
  default_f16: number;
  tuned_f16: number;
  /** TF.js WebGPU, or null where it did not run (with `tfjs_note`). */
  tfjs: number | null;
  tfjs_note?: string;
  /** The tuner's choice per precision: each family's variant name. */
  tuned: { f32: string[]; f16: string[] };
  /** The tuner's measured matmul GFLOP/s on this model, per precision. */
  tuned_gflops: { f32: number | null; f16: number | null };
  /** Whether the tuner kept every default (then `tuned_*` times the very same kernels as `default_*`). */
  tuned_is_default: { f32: boolean; f16: boolean };
}

function ourStep(model: Model, b: SyntheticBatch, batch: number): void {
  if (b.windows.length) model.trainTokens(b.windows, batch);
  else model.trainStep(b.x, b.labels, batch);
}

/** A side of the comparison: one step, and the wait until its device is idle. */
interface Side {
  step(): void;
  idle(): Promise<void>;
  dispose(): void;
}

function oursSide(
  gpu: Gpu,
  spec: ModelSpec,
  layout: ParamLayout,
  params: Float32Array,
  b: SyntheticBatch,
  batch: number,
  variants: KernelVariants,
  precision: Precision,
): Side {
  const model = createModel(gpu, spec, layout, { maxBatch: batch, optimizer: ADAMW, params, variants, precision });
  return {
    step: () => ourStep(model, b, batch),
    idle: () => gpu.device.queue.onSubmittedWorkDone(),
    dispose: () => model.destroy(),
  };
}

/** A layer stack in TF.js ops from the spec (dense, conv2d NHWC/HWIO, 2×2 max-pool), the summed loss. */
function tfStackLoss(spec: SequentialSpec, v: tf.Variable[], x: tf.Tensor, labels: Uint32Array): tf.Scalar {
  let h = x;
  let p = 0;
  for (const layer of spec.layers) {
    if (layer.type === 'maxpool2') {
      h = tf.maxPool(h as tf.Tensor4D, 2, 2, 'valid');
      continue;
    }
    const [w, bias] = [v[p++], v[p++]];
    if (layer.type === 'conv2d') h = tf.add(tf.conv2d(h as tf.Tensor4D, w as tf.Tensor4D, 1, layer.padding), bias);
    else h = tf.add(tf.matMul(tf.reshape(h, [h.shape[0], -1]) as tf.Tensor2D, w as tf.Tensor2D), bias);
    if (layer.activation === 'relu') h = tf.relu(h);
  }
  const onehot = tf.oneHot(tf.tensor1d(Array.from(labels), 'int32'), spec.classes);
  return tf.losses.softmaxCrossEntropy(onehot, h as tf.Tensor2D, undefined, undefined, tf.Reduction.SUM) as tf.Scalar;
}

function tfjsSide(
  spec: ModelSpec,
  layout: ParamLayout,
  params: Float32Array,
  b: SyntheticBatch,
  batch: number,
): Side & { loss(): Promise<number> } {
  const variables = layout.entries.map((e) =>
    tf.variable(tf.tensor(params.slice(e.offset, e.offset + e.size), e.shape), true, `bench.${e.name}`),
  );
  const byName = Object.fromEntries(layout.entries.map((e, i) => [e.name, variables[i]]));
  const optimizer = tf.train.adam(ADAMW.lr, ADAMW.beta1, ADAMW.beta2, ADAMW.eps);
  const x = isTransformer(spec) ? null : tf.tensor(b.x, [batch, ...spec.input]);
  const loss = () =>
    isTransformer(spec) ? tfLoss(spec, byName, b.windows, batch) : tfStackLoss(spec, variables, x!, b.labels);
  const backend = () => tf.backend() as WebGPUBackend;
  return {
    step: () => tf.tidy(() => void optimizer.minimize(() => tf.div(loss(), batch) as tf.Scalar, false)),
    idle: async () => {
      const be = backend();
      be.ensureCommandEncoderReady();
      be.endComputePassEncoder();
      be.submitQueue();
      await be.queue.onSubmittedWorkDone();
    },
    loss: async () => {
      const t = tf.tidy(loss);
      const value = (await t.data())[0];
      t.dispose();
      return value;
    },
    dispose: () => {
      tf.dispose([...variables, ...(x ? [x] : [])]);
      optimizer.dispose();
    },
  };
}

/**
 * Milliseconds per step of each side: `reps` rounds, each side once per round (order flipped every round),
 * after one untimed round (pipelines compiled, buffers and caches warm: without it the first side timed
 * paid for it, measured here at up to 2.5× on SwiftShader).
 */
async function timeSides(sides: Side[], reps: number, steps: number): Promise<number[]> {
  for (const s of sides) {
    for (let i = 0; i < steps + 1; i++) s.step();
    await s.idle();
  }
  const ms: number[][] = sides.map(() => []);
  for (let r = 0; r < reps; r++) {
    const order = sides.map((_, i) => (r % 2 ? sides.length - 1 - i : i));
    for (const i of order) {
      const t0 = performance.now();
      for (let s = 0; s < steps; s++) sides[i].step();
      await sides[i].idle();
      ms[i].push((performance.now() - t0) / steps);
    }
  }
  return ms.map((m) => [...m].sort((a, b) => a - b)[m.length >> 1]);
}

export interface ModelBenchOptions {
  reps: number;
  budgetMs: number;
  tfjs: boolean;
  log: (line: string) => void;
}

/** One model at one batch: tune (f32, f16), check both sides' initial losses agree, time every side. */
export async function benchModel(gpu: Gpu, name: string, batch: number, opts: ModelBenchOptions): Promise<ModelRow> {
  const spec = resolveModelSpec(name);
  const layout = parameterLayout(spec);
  const params = initParams(spec, layout, 1);
  const b = syntheticBatch(spec, batch, 99);
  const tuneFor = (precision: Precision) =>
    autotune(gpu, { spec, layout, maxBatch: batch, optimizer: ADAMW, precision, budgetMs: opts.budgetMs });
  const tuned: Record<Precision, TuningResult> = { f32: await tuneFor('f32'), f16: await tuneFor('f16') };
  opts.log(
    `${name} batch ${batch}: tuned f32 in ${tuned.f32.tuneMs.toFixed(0)} ms, f16 in ${tuned.f16.tuneMs.toFixed(0)} ms`,
  );
  const ours = (v: KernelVariants, p: Precision) => oursSide(gpu, spec, layout, params, b, batch, v, p);
  const sides: Side[] = [
    ours(DEFAULT_VARIANTS, 'f32'),
    ours(tuned.f32.variants, 'f32'),
    ours(DEFAULT_VARIANTS, 'f16'),
    ours(tuned.f16.variants, 'f16'),
  ];
  let note: string | undefined;
  if (opts.tfjs) {
    const side = tfjsSide(spec, layout, params, b, batch);
    const check = createModel(gpu, spec, layout, { maxBatch: batch, optimizer: ADAMW, params });
    if (isTransformer(spec)) check.forwardBackwardTokens(b.windows, batch);
    else check.forwardBackward(b.x, b.labels, batch);
    const [mine, theirs] = [await check.readLossSum(), await side.loss()];
    check.destroy();
    if (!(Math.abs(mine - theirs) <= 1e-3 * Math.abs(theirs)))
      throw new Error(`${name}: initial loss ${mine} (ours) vs ${theirs} (TF.js): not the same model`);
    sides.push(side);
  } else note = 'not run (--no-tfjs)';
  const steps = isTransformer(spec) ? 1 : 4;
  const ms = await timeSides(sides, opts.reps, steps);
  for (const s of sides) s.dispose();
  const names = (r: TuningResult) => r.families.map((f) => `${f.family} ${f.chosen}`);
  return {
    model: name,
    batch,
    default_f32: ms[0],
    tuned_f32: ms[1],
    default_f16: ms[2],
    tuned_f16: ms[3],
    tfjs: opts.tfjs ? ms[4] : null,
    ...(note ? { tfjs_note: note } : {}),
    tuned: { f32: names(tuned.f32), f16: names(tuned.f16) },
    tuned_gflops: { f32: tuned.f32.matmulGflops, f16: tuned.f16.matmulGflops },
    tuned_is_default: {
      f32: sameVariant(tuned.f32.variants, DEFAULT_VARIANTS),
      f16: sameVariant(tuned.f16.variants, DEFAULT_VARIANTS),
    },
  };
}

/** Make TF.js use its WebGPU backend (on `navigator.gpu`, which bench/lib/gpu-device.ts set); a reason when it cannot. */
export async function startTfjs(): Promise<string | null> {
  try {
    // Imported only now: the backend registers itself only where `navigator.gpu` exists at import time.
    await import('@tensorflow/tfjs-backend-webgpu');
    if (!(await tf.setBackend('webgpu'))) return 'TF.js could not initialise its webgpu backend in Node';
    await tf.ready();
    return null;
  } catch (err) {
    return `TF.js webgpu backend failed in Node: ${(err as Error).message}`;
  }
}

export const tfjsVersion = tf.version.tfjs;
