/**
 * A model built from a spec on the kernels: every buffer allocated and every kernel prepared once
 * (for `maxBatch`), so a training step is one command buffer with one compute pass — forward, fused
 * softmax cross-entropy, backward, optimizer — and nothing is read back unless asked.
 *
 * Memory: ONE flat params buffer, ONE flat grads buffer and one flat buffer per optimizer moment, all
 * in the caller's layout (`parameterLayout(spec)` from coordinator/core), so the optimizer is one
 * dispatch, a snapshot one copy and an allreduce one read-back. Activations are kept per layer (the
 * backward pass needs them); gradients of activations ping-pong between two scratch buffers.
 *
 * Semantics (docs/ARCHITECTURE.md, inv. 6): the loss is the SUM over the batch and the gradients are SUMS over samples;
 * the optimizer multiplies by 1/samples of the step (`gradScale`), so gradients of rank shares can be
 * added (allreduce) before one optimizer step over the whole global batch.
 */
import { countCorrect } from './argmax';
import { biasGrad } from './bias';
import { conv2dBackwardFilter, conv2dBackwardInput, conv2dForward, type Conv2dDims } from './conv2d';
import { convPad, initParams, layerShapes, paramEntries, type ModelSpecLike, type ParamLayoutLike } from './layers';
import { matmul } from './matmul';
import { maxPoolBackward, maxPoolForward, type PoolDims } from './maxpool';
import { adamw, sgdMomentum, type AdamWDims, type SgdMomentumDims } from './optimizer';
import { reluBackward } from './relu';
import {
  createTensor,
  elementCount,
  recordCalls,
  StagingReader,
  tensorView,
  type Gpu,
  type Kernel,
  type KernelCall,
  type Tensor,
} from './runtime';
import { softmaxCrossEntropy } from './softmax-xent';

export type OptimizerConfig =
  | { kind: 'adamw'; lr: number; beta1: number; beta2: number; eps: number; weightDecay: number }
  | { kind: 'sgd'; lr: number; momentum: number; weightDecay?: number };

type MatmulOptions = NonNullable<Parameters<typeof matmul>[3]>;

export interface ModelOptions {
  /** Largest batch any call will use; activations are allocated for it. */
  maxBatch: number;
  optimizer: OptimizerConfig;
  /** Initial flat parameters (`layout.totalElements`); default `initParams(spec, layout, seed)`. */
  params?: Float32Array;
  /** Seed of the default initialisation (default 1). */
  seed?: number;
  /** Matmul tile variant (override constants), e.g. chosen by the benchmark for this adapter. */
  matmulTile?: MatmulOptions['tile'];
}

export interface EvaluationResult {
  lossSum: number;
  correct: number;
  count: number;
}

/** Names of each optimizer's moment buffers, in `Model.moments` order (= snapshot section names). */
export const MOMENT_NAMES = { adamw: ['m', 'v'], sgd: ['velocity'] } as const;

/** Something whose dims follow the batch: a prepared kernel and how its dims derive from the batch. */
type Resize = (batch: number) => void;

function batched<D>(kernel: Kernel<D>, dims: (batch: number) => D, resizers: Resize[]): KernelCall {
  resizers.push((batch) => kernel.update(dims(batch)));
  return kernel.call;
}

const MAP_READ = 0x1;
const COPY_DST = 0x8;

export class Model {
  readonly spec: ModelSpecLike;
  readonly layout: ParamLayoutLike;
  readonly maxBatch: number;
  /** Parameters without alignment padding. */
  readonly paramCount: number;
  /** Floats in each flat buffer (params, grads, moments), padding included. */
  readonly totalElements: number;
  readonly params: Tensor;
  readonly grads: Tensor;
  readonly moments: readonly Tensor[];
  readonly momentNames: readonly string[];
  /** Optimizer steps applied so far (AdamW's t); the next step uses t + 1. Restored with the state. */
  optimizerStep = 0;

  readonly gpu: Gpu;
  private optimizerConfig: OptimizerConfig;
  private readonly input: Tensor;
  private readonly labels: Tensor;
  private readonly loss: Tensor;
  private readonly correct: Tensor;
  private readonly forwardCalls: KernelCall[] = [];
  private readonly backwardCalls: KernelCall[] = [];
  private readonly lossCall: KernelCall;
  private readonly correctCall: KernelCall;
  private readonly resizers: Resize[] = [];
  private readonly optimizerKernel: Kernel<AdamWDims> | Kernel<SgdMomentumDims>;
  private readonly owned: Tensor[] = [];
  /** Staging buffers for the per-step read-backs (loss, gradients), reused across steps. */
  private readonly reader: StagingReader;
  private readonly inputSize: number;
  private currentBatch: number;

  constructor(gpu: Gpu, spec: ModelSpecLike, layout: ParamLayoutLike, options: ModelOptions) {
    const { maxBatch } = options;
    if (!Number.isInteger(maxBatch) || maxBatch < 1)
      throw new Error(`createModel: maxBatch ${maxBatch} must be a positive integer`);
    this.gpu = gpu;
    this.spec = spec;
    this.layout = layout;
    this.maxBatch = maxBatch;
    this.paramCount = layout.parameterCount;
    this.totalElements = layout.totalElements;
    this.optimizerConfig = { ...options.optimizer };
    this.reader = new StagingReader(gpu, `${spec.name}.read`);

    const shapes = layerShapes(spec);
    const entries = paramEntries(spec, layout);
    const initial = options.params ?? initParams(spec, layout, options.seed ?? 1);
    if (initial.length !== layout.totalElements)
      throw new Error(`createModel: params has ${initial.length} floats, layout needs ${layout.totalElements}`);

    const tensor = (shape: readonly number[], label: string, data?: Float32Array) => {
      const t = createTensor(gpu, shape, `${spec.name}.${label}`, data);
      this.owned.push(t);
      return t;
    };
    this.inputSize = elementCount(spec.input);
    this.input = tensor([maxBatch, ...spec.input], 'input');
    this.labels = tensor([maxBatch], 'labels');
    this.loss = tensor([1], 'loss-sum');
    this.correct = tensor([1], 'correct');
    this.params = tensor([layout.totalElements], 'params', initial);
    this.grads = tensor([layout.totalElements], 'grads');
    this.momentNames = MOMENT_NAMES[options.optimizer.kind];
    this.moments = this.momentNames.map((name) => tensor([layout.totalElements], name));

    const acts = shapes.map((s, i) => tensor([maxBatch, ...s.outShape], `act${i}`));
    const maxActivation = Math.max(...shapes.map((s) => elementCount(s.outShape)));
    const scratch = [tensor([maxBatch * maxActivation], 'dact-a'), tensor([maxBatch * maxActivation], 'dact-b')];
    const scratchView = (which: number, shape: readonly number[], label: string) =>
      tensorView(scratch[which], 0, [maxBatch, ...shape], label);
    const paramView = (
      base: Tensor,
      e: { offset: number; shape: readonly number[]; name: string } | undefined,
      prefix: string,
    ) => {
      if (!e) throw new Error('unreachable: layer without parameters');
      return tensorView(base, e.offset, e.shape, `${prefix}${e.name}`);
    };
    const tile = options.matmulTile === undefined ? {} : { tile: options.matmulTile };
    const r = this.resizers;

    // Forward: layer i reads acts[i-1] (or the input) and writes acts[i]; ReLU fused into matmul/conv.
    const argmaxes: Tensor[] = [];
    spec.layers.forEach((layer, i) => {
      const { inShape, outShape } = shapes[i];
      const x = i === 0 ? this.input : acts[i - 1];
      if (layer.type === 'dense') {
        const nIn = elementCount(inShape);
        const w = paramView(this.params, entries[i].weight, '');
        const bias = paramView(this.params, entries[i].bias, '');
        const x2 = tensorView(x, 0, [maxBatch, nIn], `${x.label}.flat`);
        const k = matmul(
          gpu,
          { a: x2, b: w, out: acts[i], bias },
          { m: maxBatch, n: layer.units, k: nIn },
          { relu: layer.activation === 'relu', ...tile },
        );
        this.forwardCalls.push(batched(k, (b) => ({ m: b, n: layer.units, k: nIn }), r));
      } else if (layer.type === 'conv2d') {
        const dims = convDims(inShape, layer.filters, layer.kernel, convPad(layer));
        const k = conv2dForward(
          gpu,
          {
            x,
            w: paramView(this.params, entries[i].weight, ''),
            bias: paramView(this.params, entries[i].bias, ''),
            out: acts[i],
          },
          dims(maxBatch),
          { relu: layer.activation === 'relu' },
        );
        this.forwardCalls.push(batched(k, dims, r));
      } else {
        const argmax = tensor([maxBatch, ...outShape], `argmax${i}`);
        argmaxes[i] = argmax;
        const dims = poolDims(inShape);
        this.forwardCalls.push(batched(maxPoolForward(gpu, { x, out: acts[i], argmax }, dims(maxBatch)), dims, r));
      }
    });

    const classes = spec.classes;
    const logits = acts[acts.length - 1];
    const dlogits = scratchView(0, [classes], 'dlogits');
    this.lossCall = batched(
      softmaxCrossEntropy(gpu, { logits, labels: this.labels, loss: this.loss, dlogits }, { rows: maxBatch, classes }),
      (b) => ({ rows: b, classes }),
      r,
    );
    this.correctCall = batched(
      countCorrect(gpu, { logits, labels: this.labels, correct: this.correct }, { rows: maxBatch, classes }),
      (b) => ({ rows: b, classes }),
      r,
    );

    // Backward: `current` is the scratch buffer holding d(loss)/d(output of layer i); each op writes
    // into the other one, so no dispatch reads and writes the same buffer.
    let current = 0;
    for (let i = spec.layers.length - 1; i >= 0; i--) {
      const layer = spec.layers[i];
      const { inShape, outShape } = shapes[i];
      const x = i === 0 ? this.input : acts[i - 1];
      const dOut = scratchView(current, outShape, `d${acts[i].label}`);
      if (layer.type === 'maxpool2') {
        if (i === 0) continue;
        const dims = poolDims(inShape);
        const dx = scratchView(1 - current, inShape, `d${x.label}`);
        this.backwardCalls.push(
          batched(maxPoolBackward(gpu, { dy: dOut, argmax: argmaxes[i], dx }, dims(maxBatch)), dims, r),
        );
        current = 1 - current;
        continue;
      }
      let dz = dOut;
      if (layer.activation === 'relu') {
        dz = scratchView(1 - current, outShape, `dz${i}`);
        const size = elementCount(outShape);
        this.backwardCalls.push(
          batched(
            reluBackward(gpu, { y: acts[i], dy: dOut, dx: dz }, { size: maxBatch * size }),
            (b) => ({ size: b * size }),
            r,
          ),
        );
        current = 1 - current;
      }
      const w = paramView(this.params, entries[i].weight, '');
      const dw = paramView(this.grads, entries[i].weight, 'd');
      const dbias = paramView(this.grads, entries[i].bias, 'd');
      if (layer.type === 'dense') {
        const nIn = elementCount(inShape);
        const units = layer.units;
        const x2 = tensorView(x, 0, [maxBatch, nIn], `${x.label}.flat`);
        // dW = Xᵀ·dZ, db = column sums of dZ, dX = dZ·Wᵀ (all sums over the batch).
        const dW = matmul(gpu, { a: x2, b: dz, out: dw }, { m: nIn, n: units, k: maxBatch }, { transA: true, ...tile });
        this.backwardCalls.push(batched(dW, (b) => ({ m: nIn, n: units, k: b }), r));
        this.backwardCalls.push(
          batched(
            biasGrad(gpu, { dy: dz, dbias }, { rows: maxBatch, cols: units }),
            (b) => ({ rows: b, cols: units }),
            r,
          ),
        );
        if (i > 0) {
          const dx = scratchView(1 - current, [nIn], `d${x.label}`);
          const dX = matmul(
            gpu,
            { a: dz, b: w, out: dx },
            { m: maxBatch, n: nIn, k: units },
            { transB: true, ...tile },
          );
          this.backwardCalls.push(batched(dX, (b) => ({ m: b, n: nIn, k: units }), r));
          current = 1 - current;
        }
      } else {
        const dims = convDims(inShape, layer.filters, layer.kernel, convPad(layer));
        const pixels = outShape[0] * outShape[1];
        const filters = layer.filters;
        this.backwardCalls.push(batched(conv2dBackwardFilter(gpu, { x, dy: dz, dw }, dims(maxBatch)), dims, r));
        const dzRows = tensorView(dz, 0, [maxBatch * pixels, filters], `${dz.label}.rows`);
        this.backwardCalls.push(
          batched(
            biasGrad(gpu, { dy: dzRows, dbias }, { rows: maxBatch * pixels, cols: filters }),
            (b) => ({ rows: b * pixels, cols: filters }),
            r,
          ),
        );
        if (i > 0) {
          const dx = scratchView(1 - current, inShape, `d${x.label}`);
          this.backwardCalls.push(batched(conv2dBackwardInput(gpu, { dy: dz, w, dx }, dims(maxBatch)), dims, r));
          current = 1 - current;
        }
      }
    }

    const opt = this.optimizerConfig;
    const size = layout.totalElements;
    if (opt.kind === 'adamw') {
      this.optimizerKernel = adamw(
        gpu,
        { params: this.params, grads: this.grads, m: this.moments[0], v: this.moments[1] },
        {
          size,
          gradScale: 1,
          t: 1,
          lr: opt.lr,
          beta1: opt.beta1,
          beta2: opt.beta2,
          eps: opt.eps,
          weightDecay: opt.weightDecay,
        },
      );
    } else {
      this.optimizerKernel = sgdMomentum(
        gpu,
        { params: this.params, grads: this.grads, velocity: this.moments[0] },
        { size, gradScale: 1, lr: opt.lr, momentum: opt.momentum, weightDecay: opt.weightDecay ?? 0 },
      );
    }
    this.currentBatch = maxBatch;
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
   * Upload a batch: `x` is batch·H·W·C floats (NHWC, already scaled to [0,1]), `labels` class indices.
   * Only the first `batch` samples are used (default `labels.length`), so callers may reuse larger arrays.
   */
  setBatch(x: Float32Array, labels: Uint32Array, batch = labels.length): number {
    if (labels.length < batch) throw new Error(`setBatch: ${labels.length} labels for batch ${batch}`);
    if (x.length < batch * this.inputSize)
      throw new Error(`setBatch: x has ${x.length} floats, batch ${batch} needs ${batch * this.inputSize}`);
    this.useBatch(batch);
    const queue = this.gpu.device.queue;
    queue.writeBuffer(this.input.buffer, this.input.offset, x.buffer, x.byteOffset, batch * this.inputSize * 4);
    queue.writeBuffer(this.labels.buffer, this.labels.offset, labels.buffer, labels.byteOffset, batch * 4);
    return batch;
  }

  private forwardBackwardCalls(): KernelCall[] {
    return [...this.forwardCalls, this.lossCall, ...this.backwardCalls];
  }

  /**
   * Record forward, loss (sum) and backward for the uploaded batch: afterwards the grads buffer holds
   * gradient SUMS over the batch (every gradient is overwritten, so nothing needs zeroing).
   * Kernel sizes are uniforms written now: submit before recording with another batch size.
   */
  recordForwardBackward(encoder: GPUCommandEncoder, batch = this.currentBatch): void {
    this.useBatch(batch);
    recordCalls(encoder, this.forwardBackwardCalls(), `${this.spec.name}.forward-backward`);
  }

  private prepareOptimizer(sampleCount: number): KernelCall {
    if (!(sampleCount > 0)) throw new Error(`optimizer step: sampleCount ${sampleCount} must be positive`);
    const t = this.optimizerStep + 1;
    const opt = this.optimizerConfig;
    const size = this.totalElements;
    const gradScale = 1 / sampleCount;
    if (opt.kind === 'adamw') {
      (this.optimizerKernel as Kernel<AdamWDims>).update({
        size,
        gradScale,
        t,
        lr: opt.lr,
        beta1: opt.beta1,
        beta2: opt.beta2,
        eps: opt.eps,
        weightDecay: opt.weightDecay,
      });
    } else {
      (this.optimizerKernel as Kernel<SgdMomentumDims>).update({
        size,
        gradScale,
        lr: opt.lr,
        momentum: opt.momentum,
        weightDecay: opt.weightDecay ?? 0,
      });
    }
    this.optimizerStep = t;
    return this.optimizerKernel.call;
  }

  /** Record one optimizer step over the grads buffer, dividing the sums by `sampleCount`; t increments. */
  recordOptimizerStep(encoder: GPUCommandEncoder, sampleCount: number): void {
    recordCalls(encoder, [this.prepareOptimizer(sampleCount)], `${this.spec.name}.optimizer`);
  }

  /** Upload, forward, backward and optimizer in one submission with one compute pass; no read-back. */
  trainStep(x: Float32Array, labels: Uint32Array, batch = labels.length): void {
    this.setBatch(x, labels, batch);
    const encoder = this.gpu.device.createCommandEncoder({ label: `${this.spec.name}.train-step` });
    recordCalls(
      encoder,
      [...this.forwardBackwardCalls(), this.prepareOptimizer(batch)],
      `${this.spec.name}.train-step`,
    );
    this.gpu.device.queue.submit([encoder.finish()]);
  }

  /** Upload and compute gradient sums (the allreduce path: read them, reduce elsewhere, write back). */
  forwardBackward(x: Float32Array, labels: Uint32Array, batch = labels.length): void {
    this.setBatch(x, labels, batch);
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

  /** Replace the grads buffer (allreduced sums), `totalElements` floats in the flat layout. */
  writeGradients(grads: Float32Array): void {
    if (grads.length !== this.totalElements)
      throw new Error(`writeGradients: ${grads.length} floats, layout has ${this.totalElements}`);
    this.gpu.device.queue.writeBuffer(
      this.grads.buffer,
      this.grads.offset,
      grads.buffer,
      grads.byteOffset,
      grads.byteLength,
    );
  }

  /**
   * Summed loss and number of correct arg-max predictions over `count` samples (default all labels),
   * in chunks of `maxBatch`: one submission per chunk, each copying its two results into one staging
   * buffer that is mapped once at the end. Leaves the grads buffer untouched.
   */
  async evaluate(x: Float32Array, labels: Uint32Array, count = labels.length): Promise<EvaluationResult> {
    if (count < 1) return { lossSum: 0, correct: 0, count: 0 };
    const chunks = Math.ceil(count / this.maxBatch);
    const device = this.gpu.device;
    const staging = device.createBuffer({
      label: `${this.spec.name}.evaluate`,
      size: chunks * 8,
      usage: MAP_READ | COPY_DST,
    });
    for (let c = 0; c < chunks; c++) {
      const start = c * this.maxBatch;
      const n = Math.min(this.maxBatch, count - start);
      this.setBatch(x.subarray(start * this.inputSize), labels.subarray(start), n);
      const encoder = device.createCommandEncoder({ label: `${this.spec.name}.evaluate` });
      recordCalls(encoder, [...this.forwardCalls, this.lossCall, this.correctCall], `${this.spec.name}.evaluate`);
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

  private async readFloats(t: Tensor, count: number): Promise<Float32Array> {
    return new Float32Array(await this.reader.read(t.buffer, t.offset, count * 4));
  }

  /** Free every GPU buffer the model allocated. */
  destroy(): void {
    for (const t of this.owned) t.buffer.destroy();
    this.owned.length = 0;
    this.reader.destroy();
  }
}

function convDims(
  inShape: readonly number[],
  outChannels: number,
  kernel: number,
  pad: number,
): (batch: number) => Conv2dDims {
  const [height, width, inChannels] = inShape;
  return (batch) => ({ batch, height, width, inChannels, outChannels, kernel, pad });
}

function poolDims(inShape: readonly number[]): (batch: number) => PoolDims {
  const [height, width, channels] = inShape;
  return (batch) => ({ batch, height, width, channels });
}

/** Build a model: buffers for `options.maxBatch`, kernels prepared, parameters initialised. */
export function createModel(gpu: Gpu, spec: ModelSpecLike, layout: ParamLayoutLike, options: ModelOptions): Model {
  return new Model(gpu, spec, layout, options);
}

export { initParams } from './layers';
export type { ModelSpecLike, ParamLayoutLike } from './layers';
