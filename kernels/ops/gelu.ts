/**
 * GELU in GPT-2's tanh form: forward `y = ½x(1 + tanh(√(2/π)(x + 0.044715x³)))` and backward from the
 * pre-activation x (`dx = dy·gelu'(x)`). Out of place only: the backward needs x after the forward.
 */
import code from './gelu.wgsl?raw';
import { flatKernel, sameRange, type Gpu, type Kernel, type Tensor } from '../runtime';

export interface GeluDims {
  size: number;
}

const WORKGROUP_SIZE = 256;

function geluKernel(gpu: Gpu, entryPoint: string, tensors: readonly Tensor[], dims: GeluDims): Kernel<GeluDims> {
  return flatKernel(
    gpu,
    { code, module: 'gelu', entryPoint, workgroupSize: WORKGROUP_SIZE, uniformCount: 1, uniformWords: (d) => [d.size] },
    tensors,
    dims,
  );
}

/** y = gelu(x) over the first `size` elements; y must not be x (the backward reads x). */
export function geluForward(gpu: Gpu, t: { x: Tensor; y: Tensor }, dims: GeluDims): Kernel<GeluDims> {
  if (sameRange(t.x, t.y)) throw new Error('geluForward: y must not be x (the backward needs x)');
  return geluKernel(gpu, 'gelu_forward', [t.x, t.y], dims);
}

/** dx = dy·gelu'(x); dx may be dy, not x. */
export function geluBackward(gpu: Gpu, t: { x: Tensor; dy: Tensor; dx: Tensor }, dims: GeluDims): Kernel<GeluDims> {
  if (sameRange(t.x, t.dy) || sameRange(t.x, t.dx)) throw new Error('geluBackward: x must not be dy or dx');
  if (sameRange(t.dy, t.dx)) throw new Error('geluBackward: dx must not be dy (two writable bindings)');
  return geluKernel(gpu, 'gelu_backward', [t.x, t.dy, t.dx], dims);
}
