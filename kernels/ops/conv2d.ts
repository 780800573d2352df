/**
 * 2-D convolution (stride 1, zero padding) on NHWC activations with HWIO weights [k, k, cin, cout]:
 * forward (optionally fused with ReLU), the input gradient and the filter gradient (a SUM over the
 * batch and positions, computed sequentially per output so results are bit-reproducible).
 * The bias gradient is a column sum of dy seen as [batch·outH·outW, cout] (the bias kernels' biasGrad).
 * A network's first layer needs no input gradient: skip conv2dBackwardInput there (with one input
 * channel it is also the least efficient kernel here: 3 of 4 channel lanes idle).
 *
 * Register tiles are override constants (conv2d.wgsl). Unless given, they are chosen per layer from
 * its shape (see `chooseConv2dVariant`); all choices compute the same sums in the same order per output.
 */
import code from './conv2d.wgsl?raw';
import { ceilDiv, computePipeline, dispatch1d, preparedKernel, type Gpu, type Kernel, type Tensor } from '../runtime';

export interface Conv2dDims {
  batch: number;
  height: number;
  width: number;
  inChannels: number;
  outChannels: number;
  /** Square kernel size. */
  kernel: number;
  /** Zero padding on each side; out H = height + 2·pad − kernel + 1. */
  pad: number;
}

/** Override constants of conv2d.wgsl (part of the pipeline cache key). Omitted fields are chosen from the shape. */
export interface Conv2dVariant {
  /** Invocations per workgroup. */
  workgroupSize?: number;
  /** Output (forward) / input (backward input) pixels per invocation along a row: 1..8. */
  pixelsPerThread?: number;
  /** Consecutive kernel columns of dw per invocation (backward filter): 1..8. */
  tapsPerThread?: number;
  /** Channels per invocation (output channels; input channels for the input gradient): 4 or 8. */
  channelsPerThread?: 4 | 8;
}

export type Conv2dEntry = 'conv2d_forward' | 'conv2d_backward_input' | 'conv2d_backward_filter';

export function conv2dOutputSize(d: Conv2dDims): { height: number; width: number } {
  return { height: d.height + 2 * d.pad - d.kernel + 1, width: d.width + 2 * d.pad - d.kernel + 1 };
}

/**
 * Tiles for one kernel of one layer, from a cost model of SwiftShader, where each storage load is a
 * 4-lane gather costing several multiply-adds (measured: 7 pixels × 8 channels ran about twice as fast
 * as 4 × 4 on a 14×14×16→32 5×5 layer):
 * - pixels P along a row of width W: per kernel row and reduced channel a tile gathers P − 1 + k window
 *   values and k·C weights, for ceil(W/P) tiles; pick the P in 1..8 with the fewest gathers (7 for 14 or 28);
 * - channels C: 8 unless the tiled channel count is at most 4;
 * - filter taps: the whole kernel row when k ≤ 8, else an even split into ceil(k/8) blocks;
 * - workgroups of 64, but 16 for the filter gradient, which has few invocations (k·k·cin·cout/C/taps),
 *   so that both cores get work.
 */
export function chooseConv2dVariant(entry: Conv2dEntry, d: Conv2dDims): Required<Conv2dVariant> {
  const tiledChannels = entry === 'conv2d_backward_input' ? d.inChannels : d.outChannels;
  const channelsPerThread = tiledChannels > 4 ? 8 : 4;
  const rowWidth = entry === 'conv2d_backward_input' ? d.width : conv2dOutputSize(d).width;
  let pixelsPerThread = 1;
  let bestCost = Infinity;
  for (let p = 1; p <= 8; p++) {
    const cost = ceilDiv(rowWidth, p) * (p - 1 + d.kernel + d.kernel * channelsPerThread);
    if (cost <= bestCost) {
      bestCost = cost;
      pixelsPerThread = p;
    }
  }
  const tapsPerThread = ceilDiv(d.kernel, ceilDiv(d.kernel, 8));
  const workgroupSize = entry === 'conv2d_backward_filter' ? 16 : 64;
  return { workgroupSize, pixelsPerThread, tapsPerThread, channelsPerThread };
}

/** Tensor sizes implied by dims, for validation on every update. */
function sizes(d: Conv2dDims) {
  const out = conv2dOutputSize(d);
  return {
    input: d.batch * d.height * d.width * d.inChannels,
    output: d.batch * out.height * out.width * d.outChannels,
    weight: d.kernel * d.kernel * d.inChannels * d.outChannels,
    bias: d.outChannels,
  };
}

function invocations(entry: Conv2dEntry, d: Conv2dDims, v: Required<Conv2dVariant>): number {
  const out = conv2dOutputSize(d);
  const ch = v.channelsPerThread;
  switch (entry) {
    case 'conv2d_forward':
      return d.batch * out.height * ceilDiv(out.width, v.pixelsPerThread) * ceilDiv(d.outChannels, ch);
    case 'conv2d_backward_input':
      return d.batch * d.height * ceilDiv(d.width, v.pixelsPerThread) * ceilDiv(d.inChannels, ch);
    case 'conv2d_backward_filter':
      return d.kernel * ceilDiv(d.kernel, v.tapsPerThread) * d.inChannels * ceilDiv(d.outChannels, ch);
  }
}

function checkDims(label: string, d: Conv2dDims): void {
  const values = [d.batch, d.height, d.width, d.inChannels, d.outChannels, d.kernel, d.pad];
  if (!values.every((x) => Number.isInteger(x) && x >= 0))
    throw new Error(`${label}: dims ${JSON.stringify(d)} must be non-negative integers`);
  if (d.inChannels < 1 || d.outChannels < 1 || d.kernel < 1)
    throw new Error(`${label}: dims ${JSON.stringify(d)} need channels and kernel ≥ 1`);
  const out = conv2dOutputSize(d);
  if (out.height < 1 || out.width < 1)
    throw new Error(`${label}: kernel ${d.kernel} with pad ${d.pad} larger than input ${d.height}×${d.width}`);
}

function convKernel(
  gpu: Gpu,
  entry: Conv2dEntry,
  bound: readonly { tensor: Tensor; size: keyof ReturnType<typeof sizes> }[],
  dims: Conv2dDims,
  constants: Record<string, number>,
  variant: Conv2dVariant,
): Kernel<Conv2dDims> {
  const label = `conv2d.${entry}`;
  checkDims(label, dims);
  const v = { ...chooseConv2dVariant(entry, dims), ...variant };
  for (const [name, value] of [
    ['pixelsPerThread', v.pixelsPerThread],
    ['tapsPerThread', v.tapsPerThread],
  ] as const) {
    if (!Number.isInteger(value) || value < 1 || value > 8)
      throw new Error(`${label}: ${name} ${value} must be an integer in 1..8`);
  }
  if (v.channelsPerThread !== 4 && v.channelsPerThread !== 8)
    throw new Error(`${label}: channelsPerThread must be 4 or 8`);
  const pipeline = computePipeline(gpu, code, 'conv2d', entry, {
    WORKGROUP_SIZE: v.workgroupSize,
    PIXELS_PER_THREAD: v.pixelsPerThread,
    TAPS_PER_THREAD: v.tapsPerThread,
    WIDE: v.channelsPerThread === 8 ? 1 : 0,
    ...constants,
  });
  const plan = (d: Conv2dDims) => {
    checkDims(label, d);
    const need = sizes(d);
    for (const b of bound) {
      if (need[b.size] > b.tensor.size)
        throw new Error(`${label}: ${b.tensor.label} has ${b.tensor.size} elements, dims need ${need[b.size]}`);
    }
    const out = conv2dOutputSize(d);
    return {
      uniforms: [d.batch, d.height, d.width, d.inChannels, d.outChannels, d.kernel, d.pad, out.height, out.width],
      workgroups: dispatch1d(ceilDiv(invocations(entry, d, v), v.workgroupSize)),
    };
  };
  return preparedKernel(
    gpu,
    { label, pipeline, uniformCount: 9, bind: (uniforms) => [uniforms, ...bound.map((b) => b.tensor)], plan },
    dims,
  );
}

/** out = conv(x, w) + bias (then ReLU with `opts.relu`), overwriting out [batch, outH, outW, cout]. */
export function conv2dForward(
  gpu: Gpu,
  t: { x: Tensor; w: Tensor; bias: Tensor; out: Tensor },
  dims: Conv2dDims,
  opts: { relu?: boolean } & Conv2dVariant = {},
): Kernel<Conv2dDims> {
  const { relu, ...variant } = opts;
  const bound = [
    { tensor: t.x, size: 'input' },
    { tensor: t.w, size: 'weight' },
    { tensor: t.bias, size: 'bias' },
    { tensor: t.out, size: 'output' },
  ] as const;
  return convKernel(gpu, 'conv2d_forward', bound, dims, { RELU: relu ? 1 : 0 }, variant);
}

/** dx = ∂(Σ dy ⊙ conv(x, w))/∂x, overwriting dx [batch, H, W, cin]. */
export function conv2dBackwardInput(
  gpu: Gpu,
  t: { dy: Tensor; w: Tensor; dx: Tensor },
  dims: Conv2dDims,
  variant: Conv2dVariant = {},
): Kernel<Conv2dDims> {
  const bound = [
    { tensor: t.dy, size: 'output' },
    { tensor: t.w, size: 'weight' },
    { tensor: t.dx, size: 'input' },
  ] as const;
  return convKernel(gpu, 'conv2d_backward_input', bound, dims, {}, variant);
}

/** dw = Σ over batch and positions of x-patch ⊗ dy, overwriting dw [k, k, cin, cout] (a sum, not a mean). */
export function conv2dBackwardFilter(
  gpu: Gpu,
  t: { x: Tensor; dy: Tensor; dw: Tensor },
  dims: Conv2dDims,
  variant: Conv2dVariant = {},
): Kernel<Conv2dDims> {
  const bound = [
    { tensor: t.x, size: 'input' },
    { tensor: t.dy, size: 'output' },
    { tensor: t.dw, size: 'weight' },
  ] as const;
  return convKernel(gpu, 'conv2d_backward_filter', bound, dims, {}, variant);
}
