/**
 * Half-precision copies for the mixed-precision mode: `toHalf` writes a float32 tensor's first `size`
 * elements as IEEE halves packed two per 32-bit word (half.wgsl), the storage matmul.wgsl reads with
 * `halfA` / `halfB`. `halfWords(n)` is the words n halves take; `halfTensor` allocates such a copy.
 */
import code from './half.wgsl?raw';
import { createTensor, flatKernel, type Gpu, type Kernel, type Tensor } from '../runtime';

const WORKGROUP_SIZE = 256;

/** 32-bit words holding `elements` packed halves. */
export function halfWords(elements: number): number {
  return Math.ceil(elements / 2);
}

/** A zeroed tensor of `halfWords(elements)` words for the packed halves of a tensor of `shape`. */
export function halfTensor(gpu: Gpu, elements: number, label: string): Tensor {
  return createTensor(gpu, [halfWords(elements)], `${label}.f16`);
}

/**
 * packed ← halves of x[0, size) (round to a neighbouring half, values beyond ±65504 clamped). The
 * kernel's invocations are words, so `flatKernel`'s size (checked against both tensors) is the word
 * count; x is checked against the element count here.
 */
export function toHalf(gpu: Gpu, t: { x: Tensor; packed: Tensor }, dims: { size: number }): Kernel<{ size: number }> {
  const check = (size: number): void => {
    if (size > t.x.size) throw new Error(`toHalf: size ${size} exceeds ${t.x.label} (${t.x.size} elements)`);
  };
  check(dims.size);
  const words = flatKernel(
    gpu,
    {
      code,
      module: 'half',
      entryPoint: 'to_half',
      workgroupSize: WORKGROUP_SIZE,
      uniformCount: 1,
      uniformWords: (d: { size: number; elements: number }) => [d.elements],
    },
    [t.x, t.packed],
    { size: halfWords(dims.size), elements: dims.size },
  );
  return {
    call: words.call,
    update: (d) => {
      check(d.size);
      words.update({ size: halfWords(d.size), elements: d.size });
    },
  };
}
