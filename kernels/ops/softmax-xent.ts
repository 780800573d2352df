/**
 * Fused softmax cross-entropy for a classifier head: the SUM over rows of −log softmax(z_r)[label_r]
 * into `loss` (one float), and dlogits = softmax − onehot per row (not divided by rows: the step
 * divides the summed gradient by the samples actually in the global step, see docs/ARCHITECTURE.md, invariant (6)).
 * One workgroup, deterministic: the loss is bit-identical on every rank for the same inputs.
 */
import code from './softmax-xent.wgsl?raw';
import { computePipeline, f32bits, preparedKernel, type Gpu, type Kernel, type Tensor } from '../runtime';

export interface ClassifierDims {
  rows: number;
  classes: number;
}

export interface CrossEntropyDims extends ClassifierDims {
  /** Multiplies the loss sum and dlogits (default 1); a language model uses 1/context. */
  scale?: number;
}

/** Threads of the single workgroup (a power of two). */
const WORKGROUP_SIZE = 64;

export function checkClassifierDims(label: string, d: ClassifierDims, logits: Tensor, labels: Tensor): void {
  if (!Number.isInteger(d.rows) || d.rows < 0)
    throw new Error(`${label}: rows ${d.rows} is not a non-negative integer`);
  if (!Number.isInteger(d.classes) || d.classes < 1)
    throw new Error(`${label}: classes ${d.classes} must be a positive integer`);
  if (d.rows * d.classes > logits.size)
    throw new Error(`${label}: ${logits.label} has ${logits.size} elements, needs ${d.rows * d.classes}`);
  if (d.rows > labels.size) throw new Error(`${label}: ${labels.label} has ${labels.size} labels, needs ${d.rows}`);
}

/**
 * loss[0] = scale·Σ_r −log softmax(logits_r)[labels_r]; dlogits = scale·(softmax(logits) − onehot(labels)).
 * labels is a u32 tensor; a label ≥ classes makes the loss NaN. dlogits must not overlap logits.
 */
export function softmaxCrossEntropy(
  gpu: Gpu,
  t: { logits: Tensor; labels: Tensor; loss: Tensor; dlogits: Tensor },
  dims: CrossEntropyDims,
): Kernel<CrossEntropyDims> {
  const label = 'softmax-xent';
  return preparedKernel(
    gpu,
    {
      label,
      pipeline: computePipeline(gpu, code, label, 'softmax_xent', { WORKGROUP_SIZE }),
      uniformCount: 3,
      bind: (uniforms) => [uniforms, t.logits, t.labels, t.loss, t.dlogits],
      plan: (d: CrossEntropyDims) => {
        checkClassifierDims(label, d, t.logits, t.labels);
        if (d.rows * d.classes > t.dlogits.size)
          throw new Error(`${label}: ${t.dlogits.label} is smaller than the logits`);
        // Always one workgroup, also for zero rows (the loss is then written as 0).
        const scale = d.scale ?? 1;
        if (!(scale > 0 && Number.isFinite(scale))) throw new Error(`${label}: scale ${scale} must be positive`);
        return { uniforms: [d.rows, d.classes, f32bits(scale)], workgroups: [1, 1, 1] };
      },
    },
    dims,
  );
}
