/**
 * Elementwise kernels on flat float32 tensors (gradient accumulation, scaling, clearing):
 * `addInto` (y += x), `scaleInPlace` (x *= alpha), `fill` (x = value). One element per invocation;
 * dispatches split over x/y (dispatch1d) so multi-million-element flat buffers fit the 65,535 limit.
 */
import code from './elementwise.wgsl?raw';
import { flatKernel, f32bits, type Gpu, type Kernel, type Tensor } from '../runtime';

/** Invocations per workgroup (the WGSL override WORKGROUP_SIZE). */
export const ELEMENTWISE_WORKGROUP_SIZE = 256;

/** Override constants (pipeline cache key). */
export interface FlatVariant {
  /** Invocations per workgroup (default 256). */
  workgroupSize?: number;
}

export interface ElementwiseSize {
  size: number;
}

function elementwiseKernel<D extends ElementwiseSize>(
  gpu: Gpu,
  entryPoint: 'add_into' | 'scale_in_place' | 'fill',
  tensors: readonly Tensor[],
  dims: D,
  scalarOf: (dims: D) => number,
  variant: FlatVariant,
): Kernel<D> {
  const workgroupSize = variant.workgroupSize ?? ELEMENTWISE_WORKGROUP_SIZE;
  const uniformWords = (d: D) => [d.size, f32bits(scalarOf(d))];
  return flatKernel(
    gpu,
    { code, module: 'elementwise', entryPoint, workgroupSize, uniformCount: 2, uniformWords },
    tensors,
    dims,
  );
}

/** y[i] += x[i] for i < size. x may be a view of the same buffer as y if the ranges do not overlap. */
export function addInto(
  gpu: Gpu,
  t: { x: Tensor; y: Tensor },
  dims: ElementwiseSize,
  variant: FlatVariant = {},
): Kernel<ElementwiseSize> {
  return elementwiseKernel(gpu, 'add_into', [t.x, t.y], dims, () => 0, variant);
}

export interface ScaleDims extends ElementwiseSize {
  alpha: number;
}

/** x[i] *= alpha for i < size. */
export function scaleInPlace(
  gpu: Gpu,
  t: { x: Tensor },
  dims: ScaleDims,
  variant: FlatVariant = {},
): Kernel<ScaleDims> {
  return elementwiseKernel(gpu, 'scale_in_place', [t.x], dims, (d) => d.alpha, variant);
}

export interface FillDims extends ElementwiseSize {
  value: number;
}

/** x[i] = value for i < size. */
export function fill(gpu: Gpu, t: { x: Tensor }, dims: FillDims, variant: FlatVariant = {}): Kernel<FillDims> {
  return elementwiseKernel(gpu, 'fill', [t.x], dims, (d) => d.value, variant);
}
