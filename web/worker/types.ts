/**
 * What crosses the boundary between the page (main thread) and the training worker (Comlink).
 * Everything here is structured-clonable; big arrays travel as transferred ArrayBuffers.
 */
import type { KernelsSpec, OptimizerSpec } from '../../core/training/job';
import type { StepSketches } from '../../core/state/sketch';
import type { OuterOptimizer } from './outer-step';
import type { ModelSpec } from '../../core/training/model-spec';

export type { OptimizerSpec };

/** The WebGPU adapter as the page shows it and the coordinator records it. */
export interface AdapterSummary {
  vendor: string;
  architecture: string;
  description: string;
  device: string;
  /** A software/fallback adapter (e.g. SwiftShader on a machine without a GPU). */
  isFallback: boolean;
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
}

export type ProbeResult = { ok: true; adapter: AdapterSummary } | { ok: false; reason: string };

/** One split of the dataset: flat bytes (images count·rows·cols, labels count). */
export interface DatasetSplitBytes {
  images: Uint8Array;
  labels: Uint8Array;
  count: number;
  rows: number;
  cols: number;
}

export interface DatasetBytes {
  name: string;
  classes: number;
  train: DatasetSplitBytes;
  test: DatasetSplitBytes;
}

export interface BuildModelOptions {
  /** A built-in model name (`mlp`, `cnn`, `tiny-mlp`) or a full spec. */
  model: string | ModelSpec;
  optimizer: OptimizerSpec;
  /** The largest batch a step (or this rank's share of one) will have. */
  maxBatch: number;
  /** Seed of the parameter initialisation. */
  seed: number;
  /** Local sync mode's outer optimizer (the worker then keeps an outer momentum); absent: every-step mode. */
  outer?: OuterOptimizer;
  /** The job's kernel precision (default 'f32'); the variants are those `chooseKernels` chose for these shapes. */
  precision?: KernelsSpec['precision'];
}

/** What `chooseKernels` tunes for: the model the page will build, and the job's kernel settings. */
export interface KernelOptions {
  model: string | ModelSpec;
  optimizer: OptimizerSpec;
  /** The `maxBatch` the model will be built with (the shapes timed). */
  maxBatch: number;
  precision: KernelsSpec['precision'];
  /** When to tune (`job.kernels.tune`). */
  tune: KernelsSpec['tune'];
}

export interface ModelSummary {
  name: string;
  parameterCount: number;
  /** Length of the flat parameter / gradient buffers in float32 elements (with alignment padding). */
  totalElements: number;
}

export interface SoloOptions {
  model: string | ModelSpec;
  optimizer: OptimizerSpec;
  /** Samples per step (the last step of an epoch may be shorter). */
  globalBatch: number;
  epochs: number;
  /** Seeds the initialisation and each epoch's order (`epochOrder(seed, epoch, n)`). */
  seed: number;
  /** Train on the first `subset` training images only. */
  subset?: number;
  /** Evaluate on the first `testSubset` test images (default all; 0 skips evaluation). */
  testSubset?: number;
  /** Read the loss back every this many steps (default 10); steps in between never wait for the GPU. */
  lossEvery?: number;
}

export interface SoloProgress {
  kind: 'step' | 'evaluation';
  /** Steps completed since the start. */
  step: number;
  /** 0-based epoch of the last step. */
  epoch: number;
  /** Fraction of the current epoch done, in [0, 1]. */
  epochProgress: number;
  /**
   * Mean loss per sample of the most recent batch (the model keeps only the last batch's sum; it is
   * read back every `lossEvery` steps, so this is a sample of the training loss, not a window mean).
   */
  lossAvg: number | null;
  /** Training throughput over the steps since the previous report. */
  samplesPerSec: number | null;
  /** Set on evaluation reports: test accuracy and mean test loss. */
  accuracy?: number;
  testLoss?: number;
  testCount?: number;
}

export interface SoloResult {
  steps: number;
  epochs: number;
  /** True when `stop()` ended the run early. */
  stopped: boolean;
  lastLoss: number | null;
  accuracy: number | null;
  testLoss: number | null;
  seconds: number;
}

export interface EvaluationResult {
  /** Correct arg-max predictions per prediction (language models: per next byte). */
  accuracy: number;
  /** Mean loss per sample (language models: nats per byte). */
  lossAvg: number;
  count: number;
  /** Language models: `lossAvg` in bits per byte (lossAvg / ln 2). */
  bitsPerByte?: number;
}

export interface GradientResult {
  /**
   * Summed (not averaged) gradients over the samples, the flat layout's `totalElements` floats; null
   * when they were kept in the worker's grads buffer (`keepOnDevice`).
   */
  gradients: ArrayBuffer | null;
  /** Summed cross-entropy over the samples. */
  lossSum: number;
  samples: number;
}

/** What `restore` loaded: the record position the snapshot carries and its committed-state hash. */
export interface RestoredState {
  step: number;
  epoch: number;
  cursor: number;
  /** The agreed hash (core/state/snapshot.ts `DecodedSnapshot.stateHash`): what the ranks reported at its commit. */
  stateHash: string;
}

/** What the outer step's report needs (`outerReport`): its vectors (float32 buffers) and the wire. */
export interface OuterReportOptions {
  /** This rank's pseudo-gradient as it put it into the allreduce. */
  own: ArrayBuffer;
  /** What it sent and received in the reduce-scatter (decoded), and the all-reduced sum it applied. */
  sent: ArrayBuffer;
  received: ArrayBuffer;
  sum: ArrayBuffer;
  world: number;
  compression: 'none' | 'fp16' | 'int8';
}

/** A local-mode commit point's report additions when the job verifies. */
export interface OuterReport {
  /** Sketches of the step (core/state/step-sketches.ts), seeded by the committed-state hash. */
  sketch: StepSketches;
  /** `trainingStateHash` of the inner state this rank started the outer step from (its backup). */
  innerHash: string;
  /** Its inner optimizer's t after the inner steps. */
  innerT: number;
}
