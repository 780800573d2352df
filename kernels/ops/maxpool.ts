/**
 * 2×2 / stride-2 max pooling (floor) on NHWC tensors. Forward records, per output, the flat index
 * into x of the winning element (u32); backward scatters dy through it and writes all of dx.
 */
import code from './maxpool.wgsl?raw';
import { ceilDiv, computePipeline, dispatch1d, preparedKernel, type Gpu, type Kernel, type Tensor } from '../runtime';

export const MAXPOOL_WORKGROUP_SIZE = 256;

export interface PoolDims {
  batch: number;
  height: number;
  width: number;
  channels: number;
}

export function poolOutputShape(d: PoolDims): [number, number, number, number] {
  return [d.batch, Math.floor(d.height / 2), Math.floor(d.width / 2), d.channels];
}

function poolKernel(
  gpu: Gpu,
  entryPoint: 'maxpool_forward' | 'maxpool_backward',
  resources: { inputSized: Tensor[]; outputSized: Tensor[] },
  dims: PoolDims,
): Kernel<PoolDims> {
  const label = `maxpool.${entryPoint}`;
  const bound =
    entryPoint === 'maxpool_forward'
      ? [resources.inputSized[0], ...resources.outputSized]
      : [...resources.outputSized, resources.inputSized[0]];
  const plan = (d: PoolDims) => {
    for (const v of [d.batch, d.height, d.width, d.channels]) {
      if (!Number.isInteger(v) || v < 0)
        throw new Error(`${label}: dims ${JSON.stringify(d)} must be non-negative integers`);
    }
    if (d.height < 2 || d.width < 2) throw new Error(`${label}: input ${d.height}×${d.width} too small to pool`);
    const [, outHeight, outWidth] = poolOutputShape(d);
    const inputSize = d.batch * d.height * d.width * d.channels;
    const outputSize = d.batch * outHeight * outWidth * d.channels;
    for (const t of resources.inputSized) {
      if (inputSize > t.size) throw new Error(`${label}: ${t.label} has ${t.size} elements, dims need ${inputSize}`);
    }
    for (const t of resources.outputSized) {
      if (outputSize > t.size) throw new Error(`${label}: ${t.label} has ${t.size} elements, dims need ${outputSize}`);
    }
    const threads = entryPoint === 'maxpool_forward' ? outputSize : inputSize;
    return {
      uniforms: [d.batch, d.height, d.width, d.channels, outHeight, outWidth],
      workgroups: dispatch1d(ceilDiv(threads, MAXPOOL_WORKGROUP_SIZE)),
    };
  };
  const pipeline = computePipeline(gpu, code, 'maxpool', entryPoint, { WORKGROUP_SIZE: MAXPOOL_WORKGROUP_SIZE });
  return preparedKernel(
    gpu,
    { label, pipeline, uniformCount: 6, bind: (uniforms) => [uniforms, ...bound], plan },
    dims,
  );
}

/** out = max over each 2×2 window of x; argmax[o] = flat index into x of the maximum (first on ties). */
export function maxPoolForward(
  gpu: Gpu,
  t: { x: Tensor; out: Tensor; argmax: Tensor },
  dims: PoolDims,
): Kernel<PoolDims> {
  return poolKernel(gpu, 'maxpool_forward', { inputSized: [t.x], outputSized: [t.out, t.argmax] }, dims);
}

/** dx[i] = dy[o] where argmax[o] = i, else 0 — for every element of dx in the batch (dims of the INPUT). */
export function maxPoolBackward(
  gpu: Gpu,
  t: { dy: Tensor; argmax: Tensor; dx: Tensor },
  dims: PoolDims,
): Kernel<PoolDims> {
  return poolKernel(gpu, 'maxpool_backward', { inputSized: [t.dx], outputSized: [t.dy, t.argmax] }, dims);
}
