/**
 * Bias of a dense layer over [rows, cols]: `biasAdd` (out = x + bias, in place when x is out) and
 * `biasGrad` (dbias = Σ_rows dy, a deterministic column reduction). The matmul kernel can fuse the
 * bias into its epilogue; these exist for layers that add the bias apart (e.g. after an accumulate).
 */
import code from './bias.wgsl?raw';
import {
  ceilDiv,
  checkDims,
  checkTensorSizes,
  computePipeline,
  dispatch1d,
  preparedKernel,
  sameRange,
  type Gpu,
  type Kernel,
  type Tensor,
} from '../runtime';

export interface BiasDims {
  rows: number;
  cols: number;
}

const WORKGROUP_SIZE = 64;

function checkBiasDims(label: string, d: BiasDims, needs: readonly [Tensor, number][]): void {
  checkDims(label, { rows: d.rows, cols: d.cols });
  checkTensorSizes(label, needs);
}

/** out[r,c] = x[r,c] + bias[c]. x and out may be the same tensor (in place). */
export function biasAdd(gpu: Gpu, t: { x: Tensor; bias: Tensor; out: Tensor }, dims: BiasDims): Kernel<BiasDims> {
  const inPlace = sameRange(t.x, t.out);
  const entry = inPlace ? 'bias_add_in_place' : 'bias_add';
  const label = `bias.${entry}`;
  return preparedKernel(
    gpu,
    {
      label,
      pipeline: computePipeline(gpu, code, 'bias', entry, { WORKGROUP_SIZE }),
      uniformCount: 2,
      bind: (uniforms) => (inPlace ? [uniforms, t.bias, t.out] : [uniforms, t.bias, t.out, t.x]),
      plan: (d: BiasDims) => {
        checkBiasDims(label, d, [
          [t.x, d.rows * d.cols],
          [t.out, d.rows * d.cols],
          [t.bias, d.rows > 0 ? d.cols : 0],
        ]);
        return { uniforms: [d.rows, d.cols], workgroups: dispatch1d(ceilDiv(d.rows * d.cols, WORKGROUP_SIZE)) };
      },
    },
    dims,
  );
}

/**
 * dbias[c] (= or +=) Σ_r dy[r,c]: one invocation per column summing its rows in order, so the result
 * is bit-for-bit reproducible (ranks must agree on parameter hashes). Zero rows write zeros (or
 * leave dbias unchanged when accumulating).
 */
export function biasGrad(
  gpu: Gpu,
  t: { dy: Tensor; dbias: Tensor },
  dims: BiasDims,
  opts: { accumulate?: boolean } = {},
): Kernel<BiasDims> {
  const label = `bias.bias_grad${opts.accumulate ? '.acc' : ''}`;
  return preparedKernel(
    gpu,
    {
      label,
      pipeline: computePipeline(gpu, code, 'bias', 'bias_grad', {
        WORKGROUP_SIZE,
        ACCUMULATE: opts.accumulate ? 1 : 0,
      }),
      uniformCount: 2,
      bind: (uniforms) => [uniforms, t.dy, t.dbias],
      plan: (d: BiasDims) => {
        checkBiasDims(label, d, [
          [t.dy, d.rows * d.cols],
          [t.dbias, d.cols],
        ]);
        return { uniforms: [d.rows, d.cols], workgroups: [ceilDiv(d.cols, WORKGROUP_SIZE), 1, 1] };
      },
    },
    dims,
  );
}
