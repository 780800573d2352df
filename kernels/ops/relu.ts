/**
 * ReLU forward (`out = max(x, 0)`) and backward (`dx = dy·[y > 0]`, from the ReLU output y), each
 * allowed in place (x === out, dx === dy). The matmul epilogue fuses the forward ReLU for dense
 * layers; these serve layers that cannot fuse it and every backward pass.
 */
import code from './relu.wgsl?raw';
import { flatKernel, sameRange, type Gpu, type Kernel, type Tensor } from '../runtime';

export interface ReluDims {
  size: number;
}

const WORKGROUP_SIZE = 256;

function elementKernel(gpu: Gpu, entryPoint: string, tensors: readonly Tensor[], dims: ReluDims): Kernel<ReluDims> {
  return flatKernel(
    gpu,
    { code, module: 'relu', entryPoint, workgroupSize: WORKGROUP_SIZE, uniformCount: 1, uniformWords: (d) => [d.size] },
    tensors,
    dims,
  );
}

/** out = max(x, 0) over the first `size` elements; x may be out. */
export function reluForward(gpu: Gpu, t: { x: Tensor; out: Tensor }, dims: ReluDims): Kernel<ReluDims> {
  return sameRange(t.x, t.out)
    ? elementKernel(gpu, 'relu_forward_in_place', [t.out], dims)
    : elementKernel(gpu, 'relu_forward', [t.x, t.out], dims);
}

/** dx = dy·[y > 0] with y the ReLU output; dx may be dy. */
export function reluBackward(gpu: Gpu, t: { y: Tensor; dy: Tensor; dx: Tensor }, dims: ReluDims): Kernel<ReluDims> {
  if (sameRange(t.y, t.dy) || sameRange(t.y, t.dx)) throw new Error('reluBackward: y must not be dy or dx');
  return sameRange(t.dy, t.dx)
    ? elementKernel(gpu, 'relu_backward_in_place', [t.y, t.dx], dims)
    : elementKernel(gpu, 'relu_backward', [t.y, t.dy, t.dx], dims);
}
