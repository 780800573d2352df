/**
 * Optimizer kernels over flat parameter / gradient / moment buffers: one dispatch per step.
 * Semantics follow torch.optim.AdamW (decoupled weight decay) and torch.optim.SGD (momentum,
 * dampening 0, weight decay added to the gradient). Gradients arrive as sums over the step's samples;
 * `gradScale` (1 / samples) makes them means, so the trajectory does not depend on the number of ranks.
 * Step-dependent constants (bias corrections) are computed here in float64 and passed as uniforms:
 * `update({...dims, t})` before every step.
 */
import code from './optimizer.wgsl?raw';
import type { FlatVariant } from './elementwise';

/** The optimizer's override constants: the workgroup size and elements per invocation. */
export interface OptimizerVariant extends FlatVariant {
  /** Elements each invocation updates (default 1). */
  elementsPerThread?: number;
}
import { flatKernel, f32bits, type Gpu, type Kernel, type Tensor } from '../runtime';

export const OPTIMIZER_WORKGROUP_SIZE = 256;

export interface AdamWHyper {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
}

export interface AdamWDims extends AdamWHyper {
  /** Elements to update (a prefix of the flat buffers). */
  size: number;
  /** Multiplies the gradient sums: 1 / samples in the step. */
  gradScale: number;
  /** 1-based step number, for the bias corrections. */
  t: number;
}

export interface SgdMomentumDims {
  size: number;
  gradScale: number;
  lr: number;
  momentum: number;
  weightDecay: number;
}

function optimizerKernel<D extends { size: number }>(
  gpu: Gpu,
  entryPoint: 'adamw' | 'sgd_momentum',
  tensors: readonly Tensor[],
  dims: D,
  uniformWords: (dims: D) => number[],
  variant: OptimizerVariant,
): Kernel<D> {
  const workgroupSize = variant.workgroupSize ?? OPTIMIZER_WORKGROUP_SIZE;
  const elementsPerThread = variant.elementsPerThread ?? 1;
  if (!Number.isInteger(elementsPerThread) || elementsPerThread < 1 || elementsPerThread > 64)
    throw new Error(`optimizer: elementsPerThread ${elementsPerThread} outside 1..64`);
  return flatKernel(
    gpu,
    { code, module: 'optimizer', entryPoint, workgroupSize, elementsPerThread, uniformCount: 10, uniformWords },
    tensors,
    dims,
  );
}

/**
 * AdamW as torch.optim.AdamW (amsgrad off): with g = grads·gradScale,
 * p ← p·(1 − lr·wd); m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²;
 * p ← p − lr/(1−β1^t) · m / (√v / √(1−β2^t) + eps).
 */
export function adamw(
  gpu: Gpu,
  t: { params: Tensor; grads: Tensor; m: Tensor; v: Tensor },
  dims: AdamWDims,
  variant: OptimizerVariant = {},
): Kernel<AdamWDims> {
  return optimizerKernel(
    gpu,
    'adamw',
    [t.params, t.grads, t.m, t.v],
    dims,
    (d) => {
      if (!Number.isInteger(d.t) || d.t < 1) throw new Error(`adamw: step t=${d.t} must be a 1-based integer`);
      const biasCorrection1 = 1 - d.beta1 ** d.t;
      const biasCorrection2 = 1 - d.beta2 ** d.t;
      return [
        d.size,
        f32bits(d.gradScale),
        f32bits(d.beta1),
        f32bits(d.beta2),
        f32bits(1 - d.beta1),
        f32bits(1 - d.beta2),
        f32bits(d.eps),
        f32bits(1 - d.lr * d.weightDecay),
        f32bits(d.lr / biasCorrection1),
        f32bits(1 / Math.sqrt(biasCorrection2)),
      ];
    },
    variant,
  );
}

/**
 * SGD with momentum as torch.optim.SGD (dampening 0, nesterov off), velocity starting at zero:
 * g = grads·gradScale + wd·p; b ← momentum·b + g; p ← p − lr·b.
 */
export function sgdMomentum(
  gpu: Gpu,
  t: { params: Tensor; grads: Tensor; velocity: Tensor },
  dims: SgdMomentumDims,
  variant: OptimizerVariant = {},
): Kernel<SgdMomentumDims> {
  return optimizerKernel(
    gpu,
    'sgd_momentum',
    [t.params, t.grads, t.velocity],
    dims,
    (d) => [d.size, f32bits(d.gradScale), f32bits(d.lr), f32bits(d.momentum), f32bits(d.weightDecay)],
    variant,
  );
}
