/**
 * Causal multi-head self-attention between the QKV projection and the output projection (both plain
 * matmuls in the model): scores scaled by 1/√(head dim), the causal mask, softmax, the weighted sum
 * of values, and the backward into the QKV gradient. One invocation per (batch, head, row); the
 * probabilities [batch, heads, context, context] are kept for the backward, which also needs a
 * scratch tensor of that shape for the score gradients. See attention.wgsl for the formulas.
 */
import code from './attention.wgsl?raw';
import {
  ceilDiv,
  checkDims,
  checkTensorSizes,
  computePipeline,
  dispatch1d,
  f32bits,
  preparedKernel,
  type Gpu,
  type Kernel,
  type Tensor,
} from '../runtime';

export interface AttentionDims {
  batch: number;
  context: number;
  /** Model width: qkv rows have 3·dim columns, y rows dim. */
  dim: number;
  heads: number;
}

/** Default invocations per workgroup (the override WORKGROUP_SIZE). */
export const ATTENTION_WORKGROUP_SIZE = 64;

/** Override constants: invocations per workgroup. Each (batch, head, row) is computed alike in every variant. */
export interface AttentionVariant {
  workgroupSize?: number;
}

function check(label: string, d: AttentionDims, needs: readonly [Tensor, number][]): void {
  checkDims(label, d);
  if (d.context < 1 || d.heads < 1 || d.dim < 1 || d.dim % d.heads !== 0)
    throw new Error(`${label}: dim ${d.dim} must be a positive multiple of heads ${d.heads}`);
  checkTensorSizes(label, needs);
}

function attentionKernel(
  gpu: Gpu,
  entryPoint: string,
  tensors: readonly Tensor[],
  dims: AttentionDims,
  validate: (d: AttentionDims) => void,
  variant: AttentionVariant,
): Kernel<AttentionDims> {
  const label = `attention.${entryPoint}`;
  const WORKGROUP_SIZE = variant.workgroupSize ?? ATTENTION_WORKGROUP_SIZE;
  return preparedKernel(
    gpu,
    {
      label,
      pipeline: computePipeline(gpu, code, 'attention', entryPoint, { WORKGROUP_SIZE }),
      uniformCount: 5,
      bind: (uniforms) => [uniforms, ...tensors],
      plan: (d) => {
        validate(d);
        const scale = 1 / Math.sqrt(d.dim / d.heads);
        return {
          uniforms: [d.batch, d.context, d.dim, d.heads, f32bits(scale)],
          workgroups: dispatch1d(ceilDiv(d.batch * d.heads * d.context, WORKGROUP_SIZE)),
        };
      },
    },
    dims,
  );
}

const sizes = (d: AttentionDims) => ({
  qkv: d.batch * d.context * 3 * d.dim,
  y: d.batch * d.context * d.dim,
  scores: d.batch * d.heads * d.context * d.context,
});

/** y = causal softmax(q·kᵀ/√hd)·v per head; probs keeps the probabilities. */
export function attentionForward(
  gpu: Gpu,
  t: { qkv: Tensor; probs: Tensor; y: Tensor },
  dims: AttentionDims,
  variant: AttentionVariant = {},
): Kernel<AttentionDims> {
  return attentionKernel(
    gpu,
    'attention_forward',
    [t.qkv, t.probs, t.y],
    dims,
    (d) => {
      const s = sizes(d);
      check('attentionForward', d, [
        [t.qkv, s.qkv],
        [t.probs, s.scores],
        [t.y, s.y],
      ]);
    },
    variant,
  );
}

/**
 * The two backward kernels (queries, then keys and values), in dispatch order. dqkv is overwritten
 * entirely; dscores is scratch of the probabilities' shape.
 */
export function attentionBackward(
  gpu: Gpu,
  t: { qkv: Tensor; probs: Tensor; dy: Tensor; dscores: Tensor; dqkv: Tensor },
  dims: AttentionDims,
  variant: AttentionVariant = {},
): [Kernel<AttentionDims>, Kernel<AttentionDims>] {
  const tensors = [t.qkv, t.probs, t.dy, t.dscores, t.dqkv];
  const validate = (d: AttentionDims) => {
    const s = sizes(d);
    check('attentionBackward', d, [
      [t.qkv, s.qkv],
      [t.probs, s.scores],
      [t.dy, s.y],
      [t.dscores, s.scores],
      [t.dqkv, s.qkv],
    ]);
  };
  return [
    attentionKernel(gpu, 'attention_backward_query', tensors, dims, validate, variant),
    attentionKernel(gpu, 'attention_backward_key_value', tensors, dims, validate, variant),
  ];
}
