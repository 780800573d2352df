/**
 * LayerNorm over the last dimension (rows × dim), gain and bias per column, eps inside the square
 * root (PyTorch's and GPT-2's definition, biased variance). The forward keeps (mean, 1/std) per row in
 * `stats` for the two backward kernels: the input gradient (optionally added into the residual
 * stream's gradient) and the gain/bias gradients (sums over rows). See layernorm.wgsl; with
 * `subgroups` the forward and the input gradient run four invocations per row
 * (layernorm-subgroups.wgsl), with the same bits.
 */
import code from './layernorm.wgsl?raw';
import subgroupCode from './layernorm-subgroups.wgsl?raw';
import {
  computePipeline,
  ceilDiv,
  dispatch1d,
  f32bits,
  preparedKernel,
  sameRange,
  type Gpu,
  type Kernel,
  type Tensor,
} from '../runtime';

export interface LayerNormDims {
  rows: number;
  dim: number;
}

export const LAYERNORM_EPS = 1e-5;
/** Default invocations per workgroup (the override WORKGROUP_SIZE). */
export const LAYERNORM_WORKGROUP_SIZE = 64;

/** Override constants: invocations per workgroup. Rows and columns are computed alike in every variant. */
export interface LayerNormVariant {
  workgroupSize?: number;
  /** Four invocations per row through subgroup shuffles (forward, input gradient); needs `subgroups`. */
  subgroups?: boolean;
}

function check(
  label: string,
  d: LayerNormDims,
  rowsTensors: readonly Tensor[],
  dimTensors: readonly Tensor[],
  stats: Tensor,
) {
  if (!Number.isInteger(d.rows) || d.rows < 0)
    throw new Error(`${label}: rows ${d.rows} is not a non-negative integer`);
  if (!Number.isInteger(d.dim) || d.dim < 1) throw new Error(`${label}: dim ${d.dim} must be a positive integer`);
  for (const t of rowsTensors)
    if (t.size < d.rows * d.dim)
      throw new Error(`${label}: ${t.label} has ${t.size} elements, needs ${d.rows * d.dim}`);
  for (const t of dimTensors) if (t.size < d.dim) throw new Error(`${label}: ${t.label} is shorter than dim ${d.dim}`);
  if (stats.size < 2 * d.rows) throw new Error(`${label}: ${stats.label} needs 2 floats per row`);
}

function layerNormKernel(
  gpu: Gpu,
  entryPoint: string,
  tensors: readonly Tensor[],
  dims: LayerNormDims,
  opts: {
    accumulate?: boolean;
    perColumn?: boolean;
    validate: (d: LayerNormDims) => void;
    variant?: LayerNormVariant;
  },
): Kernel<LayerNormDims> {
  const label = `layernorm.${entryPoint}`;
  const WORKGROUP_SIZE = opts.variant?.workgroupSize ?? LAYERNORM_WORKGROUP_SIZE;
  const quads = !!opts.variant?.subgroups && !opts.perColumn;
  if (quads && !gpu.features.subgroups) throw new Error(`${label}: the subgroup variant needs the subgroups feature`);
  const [module, source] = quads ? ['layernorm-subgroups', subgroupCode] : ['layernorm', code];
  return preparedKernel(
    gpu,
    {
      label,
      pipeline: computePipeline(gpu, source, module, entryPoint, { WORKGROUP_SIZE }),
      uniformCount: 4,
      bind: (uniforms) => [uniforms, ...tensors],
      plan: (d) => {
        opts.validate(d);
        const threads = opts.perColumn ? d.dim : quads ? 4 * d.rows : d.rows;
        return {
          uniforms: [d.rows, d.dim, f32bits(LAYERNORM_EPS), opts.accumulate ? 1 : 0],
          workgroups: dispatch1d(ceilDiv(threads, WORKGROUP_SIZE)),
        };
      },
    },
    dims,
  );
}

/** y = (x − mean)/√(var + eps)·gain + bias per row; stats gets (mean, 1/std) per row. y must not be x. */
export function layerNormForward(
  gpu: Gpu,
  t: { x: Tensor; gain: Tensor; bias: Tensor; y: Tensor; stats: Tensor },
  dims: LayerNormDims,
  variant: LayerNormVariant = {},
): Kernel<LayerNormDims> {
  if (sameRange(t.x, t.y)) throw new Error('layerNormForward: y must not be x (the backward needs x)');
  return layerNormKernel(gpu, 'layernorm_forward', [t.x, t.stats, t.gain, t.bias, t.y], dims, {
    validate: (d) => check('layerNormForward', d, [t.x, t.y], [t.gain, t.bias], t.stats),
    variant,
  });
}

/** dx (=, or += with `accumulate`) the input gradient of LayerNorm, from x, its stats, gain and dy. */
export function layerNormBackwardInput(
  gpu: Gpu,
  t: { x: Tensor; stats: Tensor; gain: Tensor; dy: Tensor; dx: Tensor },
  dims: LayerNormDims,
  opts: { accumulate?: boolean; variant?: LayerNormVariant } = {},
): Kernel<LayerNormDims> {
  if (sameRange(t.dy, t.dx) || sameRange(t.x, t.dx)) throw new Error('layerNormBackwardInput: dx must not be dy or x');
  return layerNormKernel(gpu, 'layernorm_backward_input', [t.x, t.stats, t.gain, t.dy, t.dx], dims, {
    accumulate: opts.accumulate,
    variant: opts.variant,
    validate: (d) => check('layerNormBackwardInput', d, [t.x, t.dy, t.dx], [t.gain], t.stats),
  });
}

/** dgain = Σ_rows dy·x̂, dbias = Σ_rows dy (overwritten). */
export function layerNormBackwardParams(
  gpu: Gpu,
  t: { x: Tensor; stats: Tensor; dy: Tensor; dgain: Tensor; dbias: Tensor },
  dims: LayerNormDims,
  variant: LayerNormVariant = {},
): Kernel<LayerNormDims> {
  return layerNormKernel(gpu, 'layernorm_backward_params', [t.x, t.stats, t.dy, t.dgain, t.dbias], dims, {
    perColumn: true,
    variant,
    validate: (d) => check('layerNormBackwardParams', d, [t.x, t.dy], [t.dgain, t.dbias], t.stats),
  });
}
