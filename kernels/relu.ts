/**
 * ReLU forward (`out = max(x, 0)`) and backward (`dx = dy·[y > 0]`, from the ReLU output y), each
 * allowed in place (x === out, dx === dy). The matmul epilogue fuses the forward ReLU for dense
 * layers; these serve layers that cannot fuse it and every backward pass.
 */
import code from './relu.wgsl?raw';
import {
  bindBuffers,
  ceilDiv,
  computePipeline,
  createUniformBuffer,
  dispatch1d,
  writeUniforms,
  type Gpu,
  type Kernel,
  type KernelCall,
  type Tensor,
} from './runtime';

export interface ReluDims {
  size: number;
}

const WORKGROUP_SIZE = 256;

/** Same buffer range (in place)? Partial overlap would race, so it is rejected. */
function sameRange(x: Tensor, y: Tensor): boolean {
  if (x.buffer !== y.buffer) return false;
  if (x.offset === y.offset) return true;
  if (x.offset < y.offset + y.size * 4 && y.offset < x.offset + x.size * 4) {
    throw new Error(`relu: tensors ${x.label} and ${y.label} partially overlap`);
  }
  return false;
}

function elementKernel(gpu: Gpu, entry: string, tensors: readonly Tensor[], dims: ReluDims): Kernel<ReluDims> {
  const label = `relu.${entry}`;
  const pipeline = computePipeline(gpu, code, 'relu', entry, { WORKGROUP_SIZE });
  const uniforms = createUniformBuffer(gpu, 1, `${label}.params`);
  const call: KernelCall = {
    label,
    pipeline,
    bindGroup: bindBuffers(gpu, pipeline, [uniforms, ...tensors], label),
    workgroups: [0, 1, 1],
  };
  const update = ({ size }: ReluDims): void => {
    if (!Number.isInteger(size) || size < 0) throw new Error(`${label}: size ${size} is not a non-negative integer`);
    for (const t of tensors) if (size > t.size) throw new Error(`${label}: size ${size} exceeds ${t.label} (${t.size} elements)`);
    writeUniforms(gpu, uniforms, [size]);
    call.workgroups = dispatch1d(ceilDiv(size, WORKGROUP_SIZE));
  };
  update(dims);
  return { call, update };
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
