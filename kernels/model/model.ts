/**
 * A model built from a spec on the kernels: every buffer allocated and every kernel prepared once
 * (for `maxBatch`), so a training step is one command buffer with one compute pass — forward, fused
 * softmax cross-entropy, backward, optimizer — and nothing is read back unless asked.
 *
 * Memory: ONE flat params buffer, ONE flat grads buffer and one flat buffer per optimizer moment, all
 * in the caller's layout (`parameterLayout(spec)` from core/training/model-spec.ts), so the optimizer
 * is one dispatch per range (flat-optimizer.ts), a snapshot one copy and an allreduce one read-back.
 * Activations are kept per layer (the backward pass needs them); gradients of activations ping-pong
 * between two scratch buffers.
 *
 * What the step computes comes from a graph builder: model-sequential.ts (dense/conv/pool stacks) or
 * model-transformer.ts (a GPT-2-style language model); this class owns what both share: the buffers,
 * the batch upload, the step's submissions, the evaluation and the read-backs (the parameter digests
 * of the state hash are computed on the GPU by param-digests.ts).
 *
 * Semantics (docs/ARCHITECTURE.md, inv. 6): the loss is the SUM over the batch and the gradients are SUMS over samples;
 * the optimizer multiplies by 1/samples of the step (`gradScale`), so gradients of rank shares can be
 * added (allreduce) before one optimizer step over the whole global batch.
 */
import {
  isTransformer,
  type ModelSpec,
  type ParamLayout,
  type SequentialSpec,
  type TransformerSpec,
} from '../../core/training/model-spec';
import { splitWindows } from '../../core/data/text-windows';
import { initParams } from './layers';
import { graphContext, type ModelGraph, type Precision } from './model-graph';
import { withDefaults, type KernelVariants } from '../tuning/variants';
import { buildSequential } from './model-sequential';
import { buildTransformer } from './model-transformer';
import { FlatOptimizer, MOMENT_NAMES, type OptimizerConfig } from './flat-optimizer';
import { ParamDigests } from './param-digests';
import {
  createTensor,
  elementCount,
  recordCalls,
  StagingReader,
  type Gpu,
  type KernelCall,
  type Tensor,
} from '../runtime';

export interface ModelOptions {
  /** Largest batch (samples: images or token windows) any call will use; activations are allocated for it. */
  maxBatch: number;
  optimizer: OptimizerConfig;
  /** Initial flat parameters (`layout.totalElements`); default `initParams(spec, layout, seed)`. */
  params?: Float32Array;
  /** Seed of the default initialisation (default 1). */
  seed?: number;
  /**
   * Kernel variants (override constants) per op family, e.g. the autotuner's choice for this adapter
   * (kernels/tuning/); omitted families take `DEFAULT_VARIANTS`. Every variant gives the same bits.
   */
  variants?: Partial<KernelVariants>;
  /** 'f16': matmul operands (activations, weight copies) stored as halves; default 'f32' (the reference). */
  precision?: Precision;
}

export interface EvaluationResult {
  lossSum: number;
  /** Correct arg-max predictions: one per sample (classifiers) or per position (language models). */
  correct: number;
  /** Samples evaluated. */
  count: number;
}

const MAP_READ = 0x1;
const COPY_DST = 0x8;

export class Model {
  readonly spec: ModelSpec;
  readonly layout: ParamLayout;
  readonly maxBatch: number;
  /** Floats in each flat buffer (params, grads, moments), padding included. */
  readonly totalElements: number;
  readonly params: Tensor;
  readonly grads: Tensor;
  readonly moments: readonly Tensor[];
  readonly momentNames: readonly string[];
  /** Optimizer steps applied so far (AdamW's t); the next step uses t + 1. Restored with the state. */
  optimizerStep = 0;

  readonly gpu: Gpu;
  /** The kernel variants the model was built with (defaults filled in). */
  readonly variants: KernelVariants;
  readonly precision: Precision;
  private optimizerConfig: OptimizerConfig;
  private readonly input: Tensor;
  private readonly labels: Tensor;
  private readonly loss: Tensor;
  private readonly correct: Tensor;
  /** The prepared calls of a step, listed once: recorded as they are, resized through `resizers`. */
  private readonly forwardBackwardCalls: readonly KernelCall[];
  private readonly optimizerCalls: readonly KernelCall[];
  /** A training step's calls in dispatch order (what the autotuner times a family's share of, by label). */
  readonly trainStepCalls: readonly KernelCall[];
  private readonly evaluateCalls: readonly KernelCall[];
  private readonly forwardCalls: readonly KernelCall[];
  private readonly logits: Tensor;
  private readonly resizers: ((batch: number) => void)[] = [];
  /** The optimizer's prepared dispatches over the flat buffers (flat-optimizer.ts). */
  private readonly flatOptimizer: FlatOptimizer;
  private readonly owned: Tensor[] = [];
  /** Staging buffers for the per-step read-backs (loss, gradients, parameter digests), reused across steps. */
  private readonly reader: StagingReader;
  /** The parameter digests on the GPU (param-digests.ts), made by the first `withParamDigests`. */
  private readonly paramDigests: ParamDigests;
  /** The same for each moment buffer (`withStateDigests`). */
  private readonly momentDigests: ParamDigests[];
  /** Input elements per sample: pixels·channels, or context tokens. */
  private readonly inputSize: number;
  /** Labels per sample: 1, or context next-token targets. */
  private readonly labelSize: number;
  /** Token scratch for setTokens (inputs then labels), reused. */
  private tokenScratch?: Uint32Array;
  private currentBatch: number;

  constructor(gpu: Gpu, spec: ModelSpec, layout: ParamLayout, options: ModelOptions) {
    const { maxBatch } = options;
    if (!Number.isInteger(maxBatch) || maxBatch < 1)
      throw new Error(`createModel: maxBatch ${maxBatch} must be a positive integer`);
    this.gpu = gpu;
    this.spec = spec;
    this.layout = layout;
    this.maxBatch = maxBatch;
    this.totalElements = layout.totalElements;
    this.optimizerConfig = { ...options.optimizer };
    this.reader = new StagingReader(gpu, `${spec.name}.read`);
    const initial = options.params ?? initParams(spec, layout, options.seed ?? 1);
    if (initial.length !== layout.totalElements)
      throw new Error(`createModel: params has ${initial.length} floats, layout needs ${layout.totalElements}`);

    const tensor = (shape: readonly number[], label: string, data?: Float32Array) => {
      const t = createTensor(gpu, shape, `${spec.name}.${label}`, data);
      this.owned.push(t);
      return t;
    };
    // Per sample: pixels·channels and one label, or context tokens and context next tokens.
    const [inputSize, labelSize] = isTransformer(spec) ? [spec.context, spec.context] : [elementCount(spec.input), 1];
    this.inputSize = inputSize;
    this.labelSize = labelSize;
    this.input = tensor([maxBatch, inputSize], 'input');
    this.labels = tensor([maxBatch, labelSize], 'labels');
    this.loss = tensor([1], 'loss-sum');
    this.correct = tensor([1], 'correct');
    this.params = tensor([layout.totalElements], 'params', initial);
    this.grads = tensor([layout.totalElements], 'grads');
    this.momentNames = MOMENT_NAMES[options.optimizer.kind];
    this.moments = this.momentNames.map((name) => tensor([layout.totalElements], name));
    this.variants = withDefaults(options.variants);
    this.precision = options.precision ?? 'f32';
    const graph = this.buildGraph();
    this.flatOptimizer = new FlatOptimizer(
      gpu,
      layout,
      { params: this.params, grads: this.grads, moments: this.moments },
      this.optimizerConfig,
      this.variants.optimizer,
    );
    this.forwardBackwardCalls = [...graph.forward, graph.loss, ...graph.backward];
    this.optimizerCalls = this.flatOptimizer.calls;
    this.trainStepCalls = [...this.forwardBackwardCalls, ...this.optimizerCalls];
    this.evaluateCalls = [...graph.forward, graph.loss, graph.correct];
    this.forwardCalls = graph.forward;
    this.logits = graph.logits;
    this.currentBatch = maxBatch;
    this.paramDigests = new ParamDigests(gpu, this.params, layout.totalElements * 4, `${spec.name}.param-digests`);
    this.momentDigests = this.moments.map(
      (m, i) => new ParamDigests(gpu, m, layout.totalElements * 4, `${spec.name}.${this.momentNames[i]}-digests`),
    );
  }

  /** The graph's calls with the f16 mode's weight casts first in the forward pass (none in f32). */
  private buildGraph(): ModelGraph {
    const base = {
      gpu: this.gpu,
      maxBatch: this.maxBatch,
      params: this.params,
      grads: this.grads,
      input: this.input,
      labels: this.labels,
      loss: this.loss,
      correct: this.correct,
      variants: this.variants,
      precision: this.precision,
    };
    const ctx = graphContext(base, this.spec.name, this.owned, this.resizers);
    const graph = isTransformer(this.spec)
      ? buildTransformer(ctx, this.spec, this.layout)
      : buildSequential(ctx, this.spec, this.layout);
    return { ...graph, forward: [...ctx.weightCasts, ...graph.forward] };
  }

  /** The batch the prepared kernels are currently sized for. */
  get batch(): number {
    return this.currentBatch;
  }

  get optimizer(): Readonly<OptimizerConfig> {
    return this.optimizerConfig;
  }

  /** Change the learning rate (a schedule); takes effect at the next recorded optimizer step. */
  setLearningRate(lr: number): void {
    this.optimizerConfig = { ...this.optimizerConfig, lr };
  }

  /** Resize every prepared kernel to `batch` rows (uniform writes only; nothing is re-created). */
  private useBatch(batch: number): void {
    if (!Number.isInteger(batch) || batch < 1 || batch > this.maxBatch)
      throw new Error(`model ${this.spec.name}: batch ${batch} outside 1..${this.maxBatch}`);
    if (batch === this.currentBatch) return;
    for (const resize of this.resizers) resize(batch);
    this.currentBatch = batch;
  }

  /**
   * Upload a batch of `batch` samples (default: as many as `labels` holds). A classifier's `x` is
   * batch·H·W·C floats (NHWC, already scaled to [0,1]) and `labels` one class index per sample; a
   * language model's `x` is batch·context input tokens and `labels` batch·context next-token targets
   * (`setTokens` splits windows into these). Only the first `batch` samples are used.
   */
  setBatch(x: Float32Array | Uint32Array, labels: Uint32Array, batch = labels.length / this.labelSize): number {
    const lm = isTransformer(this.spec);
    if (lm !== x instanceof Uint32Array)
      throw new Error(`setBatch: ${this.spec.name} takes ${lm ? 'token ids (Uint32Array)' : 'float inputs'} as x`);
    if (labels.length < batch * this.labelSize)
      throw new Error(`setBatch: ${labels.length} labels for batch ${batch} of ${this.labelSize} each`);
    if (x.length < batch * this.inputSize)
      throw new Error(`setBatch: x has ${x.length} elements, batch ${batch} needs ${batch * this.inputSize}`);
    this.useBatch(batch);
    const queue = this.gpu.device.queue;
    queue.writeBuffer(this.input.buffer, this.input.offset, x.buffer, x.byteOffset, batch * this.inputSize * 4);
    queue.writeBuffer(
      this.labels.buffer,
      this.labels.offset,
      labels.buffer,
      labels.byteOffset,
      batch * this.labelSize * 4,
    );
    return batch;
  }

  /**
   * Upload a language-model batch: `windows` holds `batch` windows of context + 1 tokens each, one
   * after another; a window's first `context` tokens are the input and its last `context` the targets.
   */
  setTokens(windows: Uint8Array | Uint16Array | Uint32Array, batch: number): number {
    if (!isTransformer(this.spec)) throw new Error(`setTokens: ${this.spec.name} is not a language model`);
    const T = this.spec.context;
    if (windows.length < batch * (T + 1))
      throw new Error(`setTokens: ${windows.length} tokens, ${batch} windows of ${T + 1} need ${batch * (T + 1)}`);
    this.useBatch(batch);
    this.tokenScratch ??= new Uint32Array(2 * this.maxBatch * T);
    const inputs = this.tokenScratch.subarray(0, batch * T);
    const targets = this.tokenScratch.subarray(this.maxBatch * T, this.maxBatch * T + batch * T);
    splitWindows(windows, batch, T, inputs, targets);
    return this.setBatch(inputs, targets, batch);
  }

  /**
   * Record forward, loss (sum) and backward for the uploaded batch: afterwards the grads buffer holds
   * gradient SUMS over the batch (every gradient is overwritten, so nothing needs zeroing).
   * Kernel sizes are uniforms written now: submit before recording with another batch size.
   */
  recordForwardBackward(encoder: GPUCommandEncoder, batch = this.currentBatch): void {
    this.useBatch(batch);
    // The backward pass writes every tensor's gradient but not the padding between them, which would
    // keep whatever the last `writeGradients` put there (a neighbour's garbage, in an elastic step):
    // clear the whole buffer, so a rank's gradient depends on its samples and parameters alone (the
    // verifier recomputes exactly that: docs/threat-model.md).
    const g = this.grads;
    encoder.clearBuffer(g.buffer, g.offset, this.totalElements * 4);
    recordCalls(encoder, this.forwardBackwardCalls, `${this.spec.name}.forward-backward`);
  }

  /** Write the optimizer's uniforms for the next step (t + 1, 1/sampleCount, the current lr); t increments. */
  private prepareOptimizer(sampleCount: number): void {
    if (!(sampleCount > 0)) throw new Error(`optimizer step: sampleCount ${sampleCount} must be positive`);
    const t = this.optimizerStep + 1;
    this.flatOptimizer.prepare(this.optimizerConfig, t, sampleCount);
    this.optimizerStep = t;
  }

  /** Record one optimizer step over the grads buffer, dividing the sums by `sampleCount`; t increments. */
  recordOptimizerStep(encoder: GPUCommandEncoder, sampleCount: number): void {
    this.prepareOptimizer(sampleCount);
    recordCalls(encoder, this.optimizerCalls, `${this.spec.name}.optimizer`);
  }

  /** Upload, forward, backward and optimizer in one submission with one compute pass; no read-back. */
  trainStep(x: Float32Array | Uint32Array, labels: Uint32Array, batch = labels.length / this.labelSize): void {
    this.submitTrainStep(this.setBatch(x, labels, batch));
  }

  /** `trainStep` for a language model: `batch` windows of context + 1 tokens. */
  trainTokens(windows: Uint8Array | Uint16Array | Uint32Array, batch: number): void {
    this.submitTrainStep(this.setTokens(windows, batch));
  }

  private submitTrainStep(batch: number): void {
    const encoder = this.gpu.device.createCommandEncoder({ label: `${this.spec.name}.train-step` });
    this.prepareOptimizer(batch);
    recordCalls(encoder, this.trainStepCalls, `${this.spec.name}.train-step`);
    this.gpu.device.queue.submit([encoder.finish()]);
  }

  /** Upload and compute gradient sums (the allreduce path: read them, reduce elsewhere, write back). */
  forwardBackward(x: Float32Array | Uint32Array, labels: Uint32Array, batch = labels.length / this.labelSize): void {
    this.submitForwardBackward(this.setBatch(x, labels, batch));
  }

  /** `forwardBackward` for a language model. */
  forwardBackwardTokens(windows: Uint8Array | Uint16Array | Uint32Array, batch: number): void {
    this.submitForwardBackward(this.setTokens(windows, batch));
  }

  private submitForwardBackward(batch: number): void {
    const encoder = this.gpu.device.createCommandEncoder({ label: `${this.spec.name}.forward-backward` });
    this.recordForwardBackward(encoder, batch);
    this.gpu.device.queue.submit([encoder.finish()]);
  }

  /** Apply the optimizer to the grads buffer (e.g. after `writeGradients` of the allreduced sums). */
  applyOptimizer(sampleCount: number): void {
    const encoder = this.gpu.device.createCommandEncoder({ label: `${this.spec.name}.optimizer` });
    this.recordOptimizerStep(encoder, sampleCount);
    this.gpu.device.queue.submit([encoder.finish()]);
  }

  /** The summed loss of the last forward pass. */
  async readLossSum(): Promise<number> {
    return (await this.readFloats(this.loss, 1))[0];
  }

  /** The flat grads buffer (sums over the last batch), `totalElements` floats. */
  readGradients(): Promise<Float32Array> {
    return this.readFloats(this.grads, this.totalElements);
  }

  /** The flat params buffer, `totalElements` floats. */
  readParams(): Promise<Float32Array> {
    return this.readFloats(this.params, this.totalElements);
  }

  /** `fn` of the flat params as mapped, no CPU copy (`fn` must not keep it); recorded now (sees every step submitted before). */
  withParams<T>(fn: (params: Float32Array) => T): Promise<T> {
    const t = this.params;
    return this.reader.use(t.buffer, t.offset, this.totalElements * 4, (mapped) => fn(new Float32Array(mapped)));
  }

  /**
   * `fn` of the SHA-256 digests of the params' `chunkBytes` chunks (kernels/ops/sha256.wgsl, 32 bytes each)
   * as mapped: the tree hash's leaves, hashed on the GPU so only they are read back (0.8 % of the bytes at
   * 4 KiB chunks). One submission, recorded now; no GPU allocation per step. `fn` must not keep the array.
   */
  withParamDigests<T>(chunkBytes: number, fn: (digests: Uint8Array) => T): Promise<T> {
    const { digests, bytes, call } = this.paramDigests.forChunks(chunkBytes);
    return this.reader.use(
      digests.buffer,
      digests.offset,
      bytes,
      (mapped) => fn(new Uint8Array(mapped)),
      (encoder) => recordCalls(encoder, [call], `${this.spec.name}.param-digests`),
    );
  }

  /** `fn` of the training state as mapped (params, moments in `momentNames` order, t): one mapping, like `withParams`. */
  withState<T>(fn: (params: Float32Array, moments: Float32Array[], t: number) => T): Promise<T> {
    const t = this.optimizerStep;
    const n = this.totalElements;
    const tensors = [this.params, ...this.moments];
    return this.reader.useAll(tensors, n * 4, (mapped) => {
      const [params, ...moments] = tensors.map((_, i) => new Float32Array(mapped, i * n * 4, n));
      return fn(params, moments, t);
    });
  }

  /** `fn` of the chunk digests of the params and each moment (as `withParamDigests`) and t: `trainingStateHash`'s leaves. */
  withStateDigests<T>(chunkBytes: number, fn: (digests: Uint8Array[], t: number) => T): Promise<T> {
    const t = this.optimizerStep;
    const reads = [this.paramDigests, ...this.momentDigests].map((d) => {
      const { digests, bytes, call } = d.forChunks(chunkBytes);
      const record = (encoder: GPUCommandEncoder) => recordCalls(encoder, [call], `${this.spec.name}.state-digests`);
      return this.reader.use(digests.buffer, digests.offset, bytes, (m) => new Uint8Array(m.slice(0)), record);
    });
    return Promise.all(reads).then((digests) => fn(digests, t));
  }

  /** Replace the grads buffer (allreduced sums), `totalElements` floats in the flat layout. */
  writeGradients(grads: Float32Array): void {
    if (grads.length !== this.totalElements)
      throw new Error(`writeGradients: ${grads.length} floats, layout has ${this.totalElements}`);
    const g = this.grads;
    this.gpu.device.queue.writeBuffer(g.buffer, g.offset, grads.buffer, grads.byteOffset, grads.byteLength);
  }

  /**
   * Summed loss and number of correct arg-max predictions over `count` samples (default all labels),
   * in chunks of `maxBatch`. Leaves the grads buffer untouched.
   */
  evaluate(
    x: Float32Array | Uint32Array,
    labels: Uint32Array,
    count = labels.length / this.labelSize,
  ): Promise<EvaluationResult> {
    return this.evaluateChunks(count, (start, n) =>
      this.setBatch(x.subarray(start * this.inputSize), labels.subarray(start * this.labelSize), n),
    );
  }

  /** `evaluate` for a language model: `count` windows of context + 1 tokens. */
  evaluateTokens(windows: Uint8Array | Uint16Array | Uint32Array, count: number): Promise<EvaluationResult> {
    const w = this.inputSize + 1;
    return this.evaluateChunks(count, (start, n) => this.setTokens(windows.subarray(start * w), n));
  }

  /** One submission per chunk, each copying its two results into one staging buffer mapped once at the end. */
  private async evaluateChunks(count: number, upload: (start: number, n: number) => void): Promise<EvaluationResult> {
    if (count < 1) return { lossSum: 0, correct: 0, count: 0 };
    const chunks = Math.ceil(count / this.maxBatch);
    const device = this.gpu.device;
    const label = `${this.spec.name}.evaluate`;
    const staging = device.createBuffer({ label, size: chunks * 8, usage: MAP_READ | COPY_DST });
    for (let c = 0; c < chunks; c++) {
      const start = c * this.maxBatch;
      upload(start, Math.min(this.maxBatch, count - start));
      const encoder = device.createCommandEncoder({ label });
      recordCalls(encoder, this.evaluateCalls, label);
      encoder.copyBufferToBuffer(this.loss.buffer, this.loss.offset, staging, c * 8, 4);
      encoder.copyBufferToBuffer(this.correct.buffer, this.correct.offset, staging, c * 8 + 4, 4);
      device.queue.submit([encoder.finish()]);
    }
    await staging.mapAsync(MAP_READ);
    const mapped = staging.getMappedRange().slice(0, chunks * 8);
    const floats = new Float32Array(mapped);
    const words = new Uint32Array(mapped);
    let lossSum = 0;
    let correct = 0;
    for (let c = 0; c < chunks; c++) {
      lossSum += floats[2 * c];
      correct += words[2 * c + 1];
    }
    staging.unmap();
    staging.destroy();
    return { lossSum, correct, count };
  }

  /**
   * A language model's logits over the vocabulary for the token after `position` of ONE window
   * (`tokens`: up to `context` tokens; the rest of the window is zeros, which a causal model's position
   * `position` never sees). Forward pass only, batch 1: for sampling (kernels/model/generate.ts).
   */
  async nextTokenLogits(tokens: Uint32Array, position: number): Promise<Float32Array> {
    if (!isTransformer(this.spec)) throw new Error(`nextTokenLogits: ${this.spec.name} is not a language model`);
    const { context, vocab } = this.spec;
    if (tokens.length < 1 || tokens.length > context)
      throw new Error(`nextTokenLogits: ${tokens.length} tokens for a context of ${context}`);
    if (!Number.isInteger(position) || position < 0 || position >= tokens.length)
      throw new Error(`nextTokenLogits: position ${position} outside the ${tokens.length} tokens given`);
    for (const t of tokens)
      if (t >= vocab) throw new Error(`nextTokenLogits: token ${t} outside the vocabulary ${vocab}`);
    const window = new Uint32Array(context);
    window.set(tokens);
    this.setBatch(window, new Uint32Array(context), 1);
    const encoder = this.gpu.device.createCommandEncoder({ label: `${this.spec.name}.logits` });
    recordCalls(encoder, this.forwardCalls, `${this.spec.name}.logits`);
    this.gpu.device.queue.submit([encoder.finish()]);
    const l = this.logits;
    return new Float32Array(await this.reader.read(l.buffer, l.offset + position * vocab * 4, vocab * 4));
  }

  /** The first `count` floats of any tensor of this model's device (e.g. a backup copy), read back. */
  async readFloats(t: Tensor, count: number): Promise<Float32Array> {
    return new Float32Array(await this.reader.read(t.buffer, t.offset, count * 4));
  }

  /** Free every GPU buffer the model allocated. */
  destroy(): void {
    for (const t of this.owned) t.buffer.destroy();
    this.owned.length = 0;
    this.paramDigests.destroy();
    for (const d of this.momentDigests) d.destroy();
    this.reader.destroy();
  }
}

/** Build a model: buffers for `options.maxBatch`, kernels prepared, parameters initialised. */
export function createModel(gpu: Gpu, spec: ModelSpec, layout: ParamLayout, options: ModelOptions): Model {
  return new Model(gpu, spec, layout, options);
}

export { initParams } from './layers';
export type { ModelSpec, ParamLayout, SequentialSpec, TransformerSpec };
