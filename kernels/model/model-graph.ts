/**
 * What a model builder (a layer stack, a transformer) receives and returns: the Model owns the flat
 * parameter and gradient buffers, the input, labels, loss and correct-count tensors; a builder
 * allocates its activations through `tensor`, prepares its kernels once for `maxBatch`, and registers
 * how each kernel's dims follow the batch (`batched`), so resizing a step is uniform writes only.
 */
import type { MatmulTile } from '../ops/matmul';
import { createTensor, type Gpu, type Kernel, type KernelCall, type Tensor } from '../runtime';

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
  readonly tile: { tile?: MatmulTile };
  /** A zero-filled tensor the model owns (freed with it). */
  tensor(shape: readonly number[], label: string): Tensor;
  /** Record how a prepared kernel's dims derive from the batch; returns its call. */
  batched<D>(kernel: Kernel<D>, dims: (batch: number) => D): KernelCall;
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
  base: Omit<GraphContext, 'tensor' | 'batched'>,
  prefix: string,
  owned: Tensor[],
  resizers: ((batch: number) => void)[],
): GraphContext {
  return {
    ...base,
    tensor(shape, label) {
      const t = createTensor(base.gpu, shape, `${prefix}.${label}`);
      owned.push(t);
      return t;
    },
    batched(kernel, dims) {
      resizers.push((batch) => kernel.update(dims(batch)));
      return kernel.call;
    },
  };
}
