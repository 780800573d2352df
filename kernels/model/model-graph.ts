/**
 * What a model builder (a layer stack, a transformer) receives and returns: the Model owns the flat
 * parameter and gradient buffers, the input, labels, loss and correct-count tensors; a builder
 * allocates its activations through `tensor`, prepares its kernels once for `maxBatch`, and registers
 * how each kernel's dims follow the batch (`batched`), so resizing a step is uniform writes only.
 *
 * Kernel variants (kernels/tuning/variants.ts) and the precision come with the context. In the f16
 * mode every matmul reads its operands as packed halves (kernels/ops/half.ts) where the operand is an
 * activation or a weight: `halfActivation` makes an activation's copy once (its cast is recorded after
 * the activation's producer, and backward matmuls reuse the copy), `halfWeight` a weight's copy, cast
 * from the float32 master weights at the start of every forward pass (`weightCasts`). Gradients,
 * master weights, optimizer state and every other kernel stay float32.
 */
import { halfTensor, toHalf } from '../ops/half';
import type { MatmulOptions } from '../ops/matmul';
import { createTensor, type Gpu, type Kernel, type KernelCall, type Tensor } from '../runtime';
import type { KernelVariants } from '../tuning/variants';

/** Float32 everywhere (the reference), or matmul operands stored as halves (the mixed-precision mode). */
export type Precision = 'f32' | 'f16';

export interface GraphContext {
  readonly gpu: Gpu;
  readonly maxBatch: number;
  /** Flat parameters and gradients (the caller's layout). */
  readonly params: Tensor;
  readonly grads: Tensor;
  /** Stacks: float32 [maxBatch, ...input]; transformers: u32 tokens [maxBatch, context]. */
  readonly input: Tensor;
  /** u32 class indices [maxBatch] or next tokens [maxBatch, context]. */
  readonly labels: Tensor;
  /** One float: the summed loss of the batch. One u32: correct arg-max predictions. */
  readonly loss: Tensor;
  readonly correct: Tensor;
  readonly variants: KernelVariants;
  readonly precision: Precision;
  /** The matmul options of the chosen tile (spread into every matmul's options). */
  readonly tile: Pick<MatmulOptions, 'tile'>;
  /** A zero-filled tensor the model owns (freed with it). */
  tensor(shape: readonly number[], label: string): Tensor;
  /** Record how a prepared kernel's dims derive from the batch; returns its call. */
  batched<D>(kernel: Kernel<D>, dims: (batch: number) => D): KernelCall;
  /**
   * f16 mode: the packed halves of activation `x` ([maxBatch · rowsPerSample, cols] rows, the first
   * `rows(batch)` in use) and, the first time it is asked for, the cast to record after x's producer.
   */
  halfActivation(x: Tensor, cols: number, rows: (batch: number) => number): { packed: Tensor; cast?: KernelCall };
  /** f16 mode: the packed halves of weight `w`, refreshed at the start of every forward pass. */
  halfWeight(w: Tensor): Tensor;
  /** The weight casts `halfWeight` made, to record first in every forward pass. */
  readonly weightCasts: KernelCall[];
}

/** The prepared calls of one model, in dispatch order. */
export interface ModelGraph {
  forward: KernelCall[];
  /** Loss sum into `loss` and d(loss)/d(logits), for the backward. */
  loss: KernelCall;
  /** Correct arg-max predictions into `correct` (evaluation only). */
  correct: KernelCall;
  /** Overwrites every gradient in `grads` (sums over the batch): nothing needs zeroing. */
  backward: KernelCall[];
  /** The forward pass's output [maxBatch·rows, classes or vocab] (what `forward` leaves for the loss). */
  logits: Tensor;
}

/** Resizers collected by `batched`, and the tensors `tensor` allocated. */
export function graphContext(
  base: Omit<GraphContext, 'tensor' | 'batched' | 'halfActivation' | 'halfWeight' | 'weightCasts' | 'tile'>,
  prefix: string,
  owned: Tensor[],
  resizers: ((batch: number) => void)[],
): GraphContext {
  // Copies by the range they copy (views of one range are new objects each time they are made).
  const halves = new Map<GPUBuffer, Map<string, Tensor>>();
  const halfOf = (t: Tensor) => halves.get(t.buffer)?.get(`${t.offset}:${t.size}`);
  const remember = (t: Tensor, packed: Tensor) => {
    if (!halves.has(t.buffer)) halves.set(t.buffer, new Map());
    halves.get(t.buffer)!.set(`${t.offset}:${t.size}`, packed);
  };
  const weightCasts: KernelCall[] = [];
  const own = (t: Tensor): Tensor => {
    owned.push(t);
    return t;
  };
  const batched = <D>(kernel: Kernel<D>, dims: (batch: number) => D): KernelCall => {
    resizers.push((batch) => kernel.update(dims(batch)));
    return kernel.call;
  };
  return {
    ...base,
    tile: { tile: base.variants.matmul },
    weightCasts,
    tensor: (shape, label) => own(createTensor(base.gpu, shape, `${prefix}.${label}`)),
    batched,
    halfActivation(x, cols, rows) {
      const known = halfOf(x);
      if (known) return { packed: known };
      const packed = own(halfTensor(base.gpu, x.size, `${prefix}.${x.label}`));
      remember(x, packed);
      const size = (batch: number) => ({ size: rows(batch) * cols });
      return { packed, cast: batched(toHalf(base.gpu, { x, packed }, size(base.maxBatch)), size) };
    },
    halfWeight(w) {
      const known = halfOf(w);
      if (known) return known;
      const packed = own(halfTensor(base.gpu, w.size, `${prefix}.${w.label}`));
      remember(w, packed);
      weightCasts.push(toHalf(base.gpu, { x: w, packed }, { size: w.size }).call);
      return packed;
    },
  };
}
