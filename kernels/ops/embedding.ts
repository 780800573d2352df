/**
 * Token + position embedding: forward `out[r] = wte[tokens[r]] + wpe[r mod context]` over rows =
 * batch·context, and the two backward scatter-adds, written as deterministic gathers (one invocation
 * per vocabulary row, or per position and column; no float atomics, so gradients are bit-identical
 * on every run and every rank). With the output projection tied to wte, the logits' matmul writes
 * dwte first and the token pass adds into it (`accumulate`). See embedding.wgsl.
 */
import code from './embedding.wgsl?raw';
import {
  ceilDiv,
  checkDims,
  checkTensorSizes,
  computePipeline,
  dispatch1d,
  preparedKernel,
  type Gpu,
  type Kernel,
  type Tensor,
} from '../runtime';

export interface EmbeddingDims {
  /** Sequences in the batch. */
  batch: number;
  context: number;
  dim: number;
  vocab: number;
}

const WORKGROUP_SIZE = 64;

function check(label: string, d: EmbeddingDims, needs: readonly [Tensor, number][]): void {
  checkDims(label, d);
  if (d.context < 1 || d.dim < 1 || d.vocab < 1) throw new Error(`${label}: context, dim and vocab must be positive`);
  checkTensorSizes(label, needs);
}

function embeddingKernel(
  gpu: Gpu,
  entryPoint: string,
  tensors: readonly Tensor[],
  dims: EmbeddingDims,
  plan: (d: EmbeddingDims) => number,
  accumulate = false,
): Kernel<EmbeddingDims> {
  const label = `embedding.${entryPoint}`;
  return preparedKernel(
    gpu,
    {
      label,
      pipeline: computePipeline(gpu, code, 'embedding', entryPoint, { WORKGROUP_SIZE }),
      uniformCount: 5,
      bind: (uniforms) => [uniforms, ...tensors],
      plan: (d) => {
        const threads = plan(d);
        return {
          uniforms: [d.batch * d.context, d.context, d.dim, d.vocab, accumulate ? 1 : 0],
          workgroups: dispatch1d(ceilDiv(threads, WORKGROUP_SIZE)),
        };
      },
    },
    dims,
  );
}

/** out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]; tokens is u32 [batch, context]; a token ≥ vocab gives NaN. */
export function embeddingForward(
  gpu: Gpu,
  t: { tokens: Tensor; wte: Tensor; wpe: Tensor; out: Tensor },
  dims: EmbeddingDims,
): Kernel<EmbeddingDims> {
  return embeddingKernel(gpu, 'embed_forward', [t.tokens, t.wte, t.wpe, t.out], dims, (d) => {
    const rows = d.batch * d.context;
    check('embeddingForward', d, [
      [t.tokens, rows],
      [t.wte, d.vocab * d.dim],
      [t.wpe, d.context * d.dim],
      [t.out, rows * d.dim],
    ]);
    return rows * d.dim;
  });
}

/** dwte[v, :] (= or +=) Σ over rows with token v of dout[row, :]. */
export function embeddingBackwardTokens(
  gpu: Gpu,
  t: { tokens: Tensor; dout: Tensor; dwte: Tensor },
  dims: EmbeddingDims,
  opts: { accumulate?: boolean } = {},
): Kernel<EmbeddingDims> {
  return embeddingKernel(
    gpu,
    'embed_backward_tokens',
    [t.tokens, t.dout, t.dwte],
    dims,
    (d) => {
      const rows = d.batch * d.context;
      check('embeddingBackwardTokens', d, [
        [t.tokens, rows],
        [t.dout, rows * d.dim],
        [t.dwte, d.vocab * d.dim],
      ]);
      return d.vocab;
    },
    opts.accumulate,
  );
}

/** dwpe[t, :] = Σ_b dout[b, t, :] (overwritten). */
export function embeddingBackwardPositions(
  gpu: Gpu,
  t: { dout: Tensor; dwpe: Tensor },
  dims: EmbeddingDims,
): Kernel<EmbeddingDims> {
  return embeddingKernel(gpu, 'embed_backward_positions', [t.dout, t.dwpe], dims, (d) => {
    check('embeddingBackwardPositions', d, [
      [t.dout, d.batch * d.context * d.dim],
      [t.dwpe, d.context * d.dim],
    ]);
    return d.context * d.dim;
  });
}
