/**
 * The graph of a GPT-2-style decoder (pre-LayerNorm blocks, causal multi-head attention, GELU MLP,
 * final LayerNorm, output projection tied to the token embedding) over rows = batch·context tokens.
 *
 * Forward (per block l, res[0] = embedding):
 *   ln1 = LN(res[2l]); qkv = ln1·W_attn + b; att = attention(qkv); res[2l+1] = res[2l] + att·W_proj + b
 *   ln2 = LN(res[2l+1]); fc = ln2·W_fc + b; gel = gelu(fc); res[2l+2] = res[2l+1] + gel·W_mproj + b
 * then logits = LN_f(res[2L])·wteᵀ and the cross-entropy with the next tokens, scaled by 1/context so
 * a sample's loss is the mean over its positions (nats per token) and the batch loss a sum over samples.
 *
 * Backward: one buffer `dres` carries d(loss)/d(residual stream) from the top down; each branch reads
 * it, and its LayerNorm's input gradient is added back into it (the residual add's backward). dwte is
 * first written by the tied projection (dlogitsᵀ·LN_f output), then the embedding's token pass adds
 * into it. Every gradient is overwritten each step; all sums run in a fixed order (bit-reproducible).
 *
 * In the f16 mode (model-graph.ts) every matmul reads the activation it multiplies (ln1, att, ln2, gel,
 * ln_f) and the weights as packed halves; the gradients it multiplies (dres, dF2, dqkv, dlogits) stay
 * float32, as do LayerNorm, attention, GELU and the embedding.
 */
import type { ParamLayout, TransformerSpec } from '../../core/training/model-spec';
import { countCorrect } from '../ops/argmax';
import { attentionBackward, attentionForward, type AttentionDims } from '../ops/attention';
import { biasGrad } from '../ops/bias';
import {
  embeddingBackwardPositions,
  embeddingBackwardTokens,
  embeddingForward,
  type EmbeddingDims,
} from '../ops/embedding';
import { geluBackward, geluForward } from '../ops/gelu';
import { transformerEntries } from './layers';
import {
  layerNormBackwardInput,
  layerNormBackwardParams,
  layerNormForward,
  type LayerNormDims,
} from '../ops/layernorm';
import { matmul, type MatmulOptions } from '../ops/matmul';
import type { GraphContext, ModelGraph } from './model-graph';
import { residualAdd } from '../ops/residual';
import { tensorView, type KernelCall, type Tensor } from '../runtime';
import { softmaxCrossEntropy } from '../ops/softmax-xent';

interface Block {
  res: Tensor;
  ln1: Tensor;
  stats1: Tensor;
  qkv: Tensor;
  probs: Tensor;
  att: Tensor;
  mid: Tensor;
  ln2: Tensor;
  stats2: Tensor;
  fc: Tensor;
  gel: Tensor;
}

interface Parts {
  ctx: GraphContext;
  spec: TransformerSpec;
  /** A parameter (or, with 'd', its gradient) by GPT-2 name. */
  p: (name: string) => Tensor;
  d: (name: string) => Tensor;
  blocks: Block[];
  top: { res: Tensor; ln: Tensor; stats: Tensor; logits: Tensor };
  /** Scratch for the backward: d(residual), [rows, d] ×2, [rows, f] ×2, [rows, 3d], the score gradients. */
  scratch: { dres: Tensor; dA: Tensor; dB: Tensor; dF1: Tensor; dF2: Tensor; dqkv: Tensor; dscores: Tensor };
  /** Rows of the batch: batch·context. */
  rows: (batch: number) => number;
  /** The dims of the embedding, attention and LayerNorm kernels at a batch. */
  embedDims: (batch: number) => EmbeddingDims;
  attDims: (batch: number) => AttentionDims;
  lnDims: (batch: number) => LayerNormDims;
}

export function buildTransformer(ctx: GraphContext, spec: TransformerSpec, layout: ParamLayout): ModelGraph {
  const parts = allocate(ctx, spec, layout);
  const forward = forwardCalls(parts);
  const { loss, correct } = headCalls(parts);
  return { forward, loss, correct, backward: backwardCalls(parts), logits: parts.top.logits };
}

function allocate(ctx: GraphContext, spec: TransformerSpec, layout: ParamLayout): Parts {
  const entry = transformerEntries(spec, layout);
  const { dModel: d, context, heads, vocab } = spec;
  const f = spec.mlpRatio * d;
  const R = ctx.maxBatch * context;
  const t = (cols: number, label: string) => ctx.tensor([R, cols], label);
  const blocks = Array.from({ length: spec.layers }, (_, l) => ({
    res: t(d, `h${l}.res`),
    ln1: t(d, `h${l}.ln1`),
    stats1: t(2, `h${l}.stats1`),
    qkv: t(3 * d, `h${l}.qkv`),
    probs: ctx.tensor([ctx.maxBatch, heads, context, context], `h${l}.probs`),
    att: t(d, `h${l}.att`),
    mid: t(d, `h${l}.mid`),
    ln2: t(d, `h${l}.ln2`),
    stats2: t(2, `h${l}.stats2`),
    fc: t(f, `h${l}.fc`),
    gel: t(f, `h${l}.gel`),
  }));
  const top = { res: t(d, 'res'), ln: t(d, 'ln_f'), stats: t(2, 'stats_f'), logits: t(vocab, 'logits') };
  const scratch = {
    dres: t(d, 'dres'),
    dA: t(Math.max(d, vocab), 'dA'),
    dB: t(d, 'dB'),
    dF1: t(f, 'dF1'),
    dF2: t(f, 'dF2'),
    dqkv: t(3 * d, 'dqkv'),
    dscores: ctx.tensor([ctx.maxBatch, heads, context, context], 'dscores'),
  };
  const p = (name: string) => {
    const e = entry(name);
    return tensorView(ctx.params, e.offset, e.shape, name);
  };
  const dp = (name: string) => {
    const e = entry(name);
    return tensorView(ctx.grads, e.offset, e.shape, `d${name}`);
  };
  return {
    ctx,
    spec,
    p,
    d: dp,
    blocks,
    top,
    scratch,
    rows: (b) => b * context,
    embedDims: (b) => ({ batch: b, context, dim: d, vocab }),
    attDims: (b) => ({ batch: b, context, dim: d, heads }),
    lnDims: (b) => ({ rows: b * context, dim: d }),
  };
}

/**
 * An activation [rows, cols] as a matmul operand: itself, or (f16 mode) its packed halves, with the
 * cast the first time (the forward records it; backward matmuls find the copy made).
 */
function activation(parts: Parts, x: Tensor): { t: Tensor; half: boolean; cast?: KernelCall } {
  const { ctx } = parts;
  if (ctx.precision !== 'f16') return { t: x, half: false };
  const { packed, cast } = ctx.halfActivation(x, x.shape[1], parts.rows);
  return { t: packed, half: true, cast };
}

/** A weight as a matmul operand: itself, or (f16 mode) its copy in halves. */
function weight(parts: Parts, w: Tensor): { t: Tensor; half: boolean } {
  const { ctx } = parts;
  return ctx.precision === 'f16' ? { t: ctx.halfWeight(w), half: true } : { t: w, half: false };
}

/** out = a·b (+bias) over `rows` rows (k and n from the weight's shape), after a's cast in the f16 mode. */
function linear(parts: Parts, a: Tensor, w: Tensor, out: Tensor, bias?: Tensor): KernelCall[] {
  const [k, n] = w.shape;
  const dims = (b: number) => ({ m: parts.rows(b), n, k });
  const { ctx } = parts;
  const x = activation(parts, a);
  const wt = weight(parts, w);
  const opts: MatmulOptions = { halfA: x.half, halfB: wt.half, ...ctx.tile };
  const call = ctx.batched(matmul(ctx.gpu, { a: x.t, b: wt.t, out, bias }, dims(ctx.maxBatch), opts), dims);
  return x.cast ? [x.cast, call] : [call];
}

function layerNorm(parts: Parts, x: Tensor, name: string, y: Tensor, stats: Tensor): KernelCall {
  const { ctx } = parts;
  const dims = parts.lnDims;
  const t = { x, gain: parts.p(`${name}.weight`), bias: parts.p(`${name}.bias`), y, stats };
  return ctx.batched(layerNormForward(ctx.gpu, t, dims(ctx.maxBatch), ctx.variants.layernorm), dims);
}

function elementwise(parts: Parts, cols: number) {
  return (b: number) => ({ size: parts.rows(b) * cols });
}

function forwardCalls(parts: Parts): KernelCall[] {
  const { ctx, spec, p, blocks, top, embedDims, attDims } = parts;
  const { gpu, maxBatch } = ctx;
  const { dModel: d, mlpRatio } = spec;
  const residual = elementwise(parts, d);
  const gelu = elementwise(parts, mlpRatio * d);
  const embed = { tokens: ctx.input, wte: p('wte.weight'), wpe: p('wpe.weight'), out: blocks[0]?.res ?? top.res };
  const calls = [ctx.batched(embeddingForward(gpu, embed, embedDims(maxBatch)), embedDims)];
  const att = ctx.variants.attention;
  blocks.forEach((k, l) => {
    const h = `h.${l}`;
    const next = blocks[l + 1]?.res ?? top.res;
    calls.push(
      layerNorm(parts, k.res, `${h}.ln_1`, k.ln1, k.stats1),
      ...linear(parts, k.ln1, p(`${h}.attn.c_attn.weight`), k.qkv, p(`${h}.attn.c_attn.bias`)),
      ctx.batched(attentionForward(gpu, { qkv: k.qkv, probs: k.probs, y: k.att }, attDims(maxBatch), att), attDims),
      // The projection's output goes to `next` as scratch first, then mid = res + it.
      ...linear(parts, k.att, p(`${h}.attn.c_proj.weight`), next, p(`${h}.attn.c_proj.bias`)),
      ctx.batched(residualAdd(gpu, { a: k.res, b: next, out: k.mid }, residual(maxBatch)), residual),
      layerNorm(parts, k.mid, `${h}.ln_2`, k.ln2, k.stats2),
      ...linear(parts, k.ln2, p(`${h}.mlp.c_fc.weight`), k.fc, p(`${h}.mlp.c_fc.bias`)),
      ctx.batched(geluForward(gpu, { x: k.fc, y: k.gel }, gelu(maxBatch)), gelu),
      ...linear(parts, k.gel, p(`${h}.mlp.c_proj.weight`), parts.scratch.dB, p(`${h}.mlp.c_proj.bias`)),
      ctx.batched(residualAdd(gpu, { a: k.mid, b: parts.scratch.dB, out: next }, residual(maxBatch)), residual),
    );
  });
  calls.push(layerNorm(parts, top.res, 'ln_f', top.ln, top.stats));
  // logits = ln_f · wteᵀ (wte is [vocab, d], i.e. stored [n, k]).
  const dims = (b: number) => ({ m: parts.rows(b), n: spec.vocab, k: d });
  const x = activation(parts, top.ln);
  const w = weight(parts, p('wte.weight'));
  const t = { a: x.t, b: w.t, out: top.logits };
  if (x.cast) calls.push(x.cast);
  const opts: MatmulOptions = { transB: true, halfA: x.half, halfB: w.half, ...ctx.tile };
  calls.push(ctx.batched(matmul(gpu, t, dims(maxBatch), opts), dims));
  return calls;
}

function headCalls(parts: Parts): { loss: KernelCall; correct: KernelCall } {
  const { ctx, spec, top, scratch } = parts;
  const classes = spec.vocab;
  const dlogits = tensorView(scratch.dA, 0, [ctx.maxBatch * spec.context, classes], 'dlogits');
  const dims = (b: number) => ({ rows: parts.rows(b), classes, scale: 1 / spec.context });
  const t = { logits: top.logits, labels: ctx.labels };
  return {
    loss: ctx.batched(softmaxCrossEntropy(ctx.gpu, { ...t, loss: ctx.loss, dlogits }, dims(ctx.maxBatch)), dims),
    correct: ctx.batched(countCorrect(ctx.gpu, { ...t, correct: ctx.correct }, dims(ctx.maxBatch)), dims),
  };
}

/** dW = xᵀ·dy and db = Σ_rows dy of a linear layer, and (when `dx`) dx = dy·Wᵀ. */
function linearBackward(parts: Parts, name: string, x: Tensor, dy: Tensor, dx?: Tensor): KernelCall[] {
  const { ctx } = parts;
  const { gpu, maxBatch, tile } = ctx;
  const w = parts.p(`${name}.weight`);
  const [k, n] = w.shape;
  const dW = (b: number) => ({ m: k, n, k: parts.rows(b) });
  const db = (b: number) => ({ rows: parts.rows(b), cols: n });
  // x's half copy was made (and cast) by the forward pass.
  const xa = activation(parts, x);
  const dWopts: MatmulOptions = { transA: true, halfA: xa.half, ...tile };
  const calls = [
    ctx.batched(matmul(gpu, { a: xa.t, b: dy, out: parts.d(`${name}.weight`) }, dW(maxBatch), dWopts), dW),
    ctx.batched(biasGrad(gpu, { dy, dbias: parts.d(`${name}.bias`) }, db(maxBatch)), db),
  ];
  if (dx) {
    const dX = (b: number) => ({ m: parts.rows(b), n: k, k: n });
    const wt = weight(parts, w);
    const opts: MatmulOptions = { transB: true, halfB: wt.half, ...tile };
    calls.push(ctx.batched(matmul(gpu, { a: dy, b: wt.t, out: dx }, dX(maxBatch), opts), dX));
  }
  return calls;
}

/** LayerNorm's parameter gradients, and its input gradient (added into `dx` when `accumulate`). */
function layerNormBackward(
  parts: Parts,
  name: string,
  x: Tensor,
  stats: Tensor,
  dy: Tensor,
  dx: Tensor,
  accumulate: boolean,
) {
  const { ctx } = parts;
  const dims = parts.lnDims;
  const params = { x, stats, dy, dgain: parts.d(`${name}.weight`), dbias: parts.d(`${name}.bias`) };
  const input = { x, stats, gain: parts.p(`${name}.weight`), dy, dx };
  const variant = ctx.variants.layernorm;
  return [
    ctx.batched(layerNormBackwardParams(ctx.gpu, params, dims(ctx.maxBatch), variant), dims),
    ctx.batched(layerNormBackwardInput(ctx.gpu, input, dims(ctx.maxBatch), { accumulate, variant }), dims),
  ];
}

function backwardCalls(parts: Parts): KernelCall[] {
  const { ctx, spec, top, scratch: s, embedDims } = parts;
  const { gpu, maxBatch, tile } = ctx;
  const dlogits = tensorView(s.dA, 0, [maxBatch * spec.context, spec.vocab], 'dlogits');
  const dlnf = tensorView(s.dB, 0, [maxBatch * spec.context, spec.dModel], 'dln_f');
  const headX = (b: number) => ({ m: parts.rows(b), n: spec.dModel, k: spec.vocab });
  const headW = (b: number) => ({ m: spec.vocab, n: spec.dModel, k: parts.rows(b) });
  const wte = weight(parts, parts.p('wte.weight'));
  const ln = activation(parts, top.ln);
  const calls = [
    // dln_f = dlogits·wte; dwte = dlogitsᵀ·ln_f (overwrites; the embedding adds its part last).
    ctx.batched(matmul(gpu, { a: dlogits, b: wte.t, out: dlnf }, headX(maxBatch), { halfB: wte.half, ...tile }), headX),
    ctx.batched(
      matmul(gpu, { a: dlogits, b: ln.t, out: parts.d('wte.weight') }, headW(maxBatch), {
        transA: true,
        halfB: ln.half,
        ...tile,
      }),
      headW,
    ),
    ...layerNormBackward(parts, 'ln_f', top.res, top.stats, dlnf, s.dres, false),
  ];
  for (let l = spec.layers - 1; l >= 0; l--) calls.push(...blockBackward(parts, l));
  const tokens = { tokens: ctx.input, dout: s.dres, dwte: parts.d('wte.weight') };
  calls.push(
    ctx.batched(embeddingBackwardTokens(gpu, tokens, embedDims(maxBatch), { accumulate: true }), embedDims),
    ctx.batched(
      embeddingBackwardPositions(gpu, { dout: s.dres, dwpe: parts.d('wpe.weight') }, embedDims(maxBatch)),
      embedDims,
    ),
  );
  return calls;
}

/** One block from the top: the MLP branch, then the attention branch; each adds into dres. */
function blockBackward(parts: Parts, l: number): KernelCall[] {
  const { ctx, spec, blocks, scratch: s, attDims } = parts;
  const { gpu, maxBatch } = ctx;
  const k = blocks[l];
  const h = `h.${l}`;
  const gelu = elementwise(parts, spec.mlpRatio * spec.dModel);
  const [attQ, attKV] = attentionBackward(
    gpu,
    { qkv: k.qkv, probs: k.probs, dy: s.dA, dscores: s.dscores, dqkv: s.dqkv },
    attDims(maxBatch),
    ctx.variants.attention,
  );
  const dA = tensorView(s.dA, 0, [maxBatch * spec.context, spec.dModel], 'dA');
  return [
    ...linearBackward(parts, `${h}.mlp.c_proj`, k.gel, s.dres, s.dF1),
    ctx.batched(geluBackward(gpu, { x: k.fc, dy: s.dF1, dx: s.dF2 }, gelu(maxBatch)), gelu),
    ...linearBackward(parts, `${h}.mlp.c_fc`, k.ln2, s.dF2, s.dB),
    ...layerNormBackward(parts, `${h}.ln_2`, k.mid, k.stats2, s.dB, s.dres, true),
    ...linearBackward(parts, `${h}.attn.c_proj`, k.att, s.dres, dA),
    ctx.batched(attQ, attDims),
    ctx.batched(attKV, attDims),
    ...linearBackward(parts, `${h}.attn.c_attn`, k.ln1, s.dqkv, s.dB),
    ...layerNormBackward(parts, `${h}.ln_1`, k.res, k.stats1, s.dB, s.dres, true),
  ];
}
