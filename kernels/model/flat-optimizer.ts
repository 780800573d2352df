/**
 * The optimizer of a model's flat buffers (params, grads and one buffer per moment, all in the
 * `parameterLayout` order of core/training/model-spec.ts): one AdamW or SGD-momentum dispatch
 * (kernels/ops/optimizer.ts) per range of the buffers, prepared once. The first `layout.decayElements`
 * get weight decay, the rest (a transformer's biases and LayerNorm parameters) none. Before each step
 * is recorded, `prepare` writes its uniforms (t, 1/sampleCount, the current lr); the model keeps t.
 */
import type { ParamLayout } from '../../core/training/model-spec';
import { adamw, sgdMomentum, type AdamWDims, type OptimizerVariant, type SgdMomentumDims } from '../ops/optimizer';
import { tensorView, type Gpu, type Kernel, type KernelCall, type Tensor } from '../runtime';

export type OptimizerConfig =
  | { kind: 'adamw'; lr: number; beta1: number; beta2: number; eps: number; weightDecay: number }
  | { kind: 'sgd'; lr: number; momentum: number; weightDecay?: number };

/** Names of each optimizer's moment buffers, in `Model.moments` order (= snapshot section names). */
export const MOMENT_NAMES = { adamw: ['m', 'v'], sgd: ['velocity'] } as const;

/** A range of the flat buffers the optimizer updates with one dispatch, and whether weight decay applies. */
interface OptimizerRange {
  kernel: Kernel<AdamWDims> | Kernel<SgdMomentumDims>;
  size: number;
  decay: boolean;
}

/** The flat buffers an optimizer step reads and writes (`moments` in `MOMENT_NAMES` order). */
export interface FlatBuffers {
  params: Tensor;
  grads: Tensor;
  moments: readonly Tensor[];
}

export class FlatOptimizer {
  /** The prepared dispatches, one per range, in the order they are recorded. */
  readonly calls: readonly KernelCall[];
  private readonly ranges: readonly OptimizerRange[];

  /** Prepares the dispatches for `config`'s kind; hyperparameters are written again by `prepare`. */
  constructor(
    gpu: Gpu,
    layout: ParamLayout,
    buffers: FlatBuffers,
    config: OptimizerConfig,
    variant: OptimizerVariant = {},
  ) {
    const { decayElements, totalElements } = layout;
    const ranges = [
      { start: 0, size: decayElements, decay: true },
      { start: decayElements, size: totalElements - decayElements, decay: false },
    ].filter((r) => r.size > 0);
    const { params, grads, moments } = buffers;
    this.ranges = ranges.map(({ start, size, decay }) => {
      const v = (t: Tensor) => tensorView(t, start, [size], `${t.label}[${start}:]`);
      const kernel =
        config.kind === 'adamw'
          ? adamw(
              gpu,
              { params: v(params), grads: v(grads), m: v(moments[0]), v: v(moments[1]) },
              { ...config, size, gradScale: 1, t: 1 },
              variant,
            )
          : sgdMomentum(
              gpu,
              { params: v(params), grads: v(grads), velocity: v(moments[0]) },
              { size, gradScale: 1, lr: config.lr, momentum: config.momentum, weightDecay: config.weightDecay ?? 0 },
              variant,
            );
      return { kernel, size, decay };
    });
    this.calls = this.ranges.map((r) => r.kernel.call);
  }

  /** Write the uniforms of optimizer step `t` with `config`, dividing the gradient sums by `sampleCount`. */
  prepare(config: OptimizerConfig, t: number, sampleCount: number): void {
    const gradScale = 1 / sampleCount;
    for (const { kernel, size, decay } of this.ranges) {
      const weightDecay = decay ? (config.weightDecay ?? 0) : 0;
      if (config.kind === 'adamw') (kernel as Kernel<AdamWDims>).update({ ...config, size, gradScale, t, weightDecay });
      else
        (kernel as Kernel<SgdMomentumDims>).update({
          size,
          gradScale,
          lr: config.lr,
          momentum: config.momentum,
          weightDecay,
        });
    }
  }
}
