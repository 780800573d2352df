/**
 * Residual add `out = a + b` for the transformer's residual stream. The backward needs no kernel:
 * LayerNorm's input gradient adds its branch into the stream's gradient (see layernorm.ts).
 */
import code from './residual.wgsl?raw';
import { flatKernel, sameRange, type Gpu, type Kernel, type Tensor } from '../runtime';

export interface ResidualDims {
  size: number;
}

/** out = a + b over the first `size` elements; out must not overlap a or b. */
export function residualAdd(
  gpu: Gpu,
  t: { a: Tensor; b: Tensor; out: Tensor },
  dims: ResidualDims,
): Kernel<ResidualDims> {
  if (sameRange(t.a, t.out) || sameRange(t.b, t.out)) throw new Error('residualAdd: out must not be a or b');
  return flatKernel(
    gpu,
    {
      code,
      module: 'residual',
      entryPoint: 'residual_add',
      workgroupSize: 256,
      uniformCount: 1,
      uniformWords: (d) => [d.size],
    },
    [t.a, t.b, t.out],
    dims,
  );
}
