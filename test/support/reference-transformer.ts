/**
 * Float64 CPU references for the transformer kernels, written by hand from the definitions (plain
 * index loops, nothing shared with the WGSL or kernels/): embedding, LayerNorm, GELU (tanh form),
 * causal multi-head attention, each forward and backward. Layouts follow kernels/: rows × columns,
 * row-major; qkv rows are [q | k | v], head h owning columns h·hd .. (h+1)·hd of each part.
 */

export function embeddingRef(
  tokens: ArrayLike<number>,
  wte: ArrayLike<number>,
  wpe: ArrayLike<number>,
  context: number,
  dim: number,
): Float64Array {
  const out = new Float64Array(tokens.length * dim);
  for (let r = 0; r < tokens.length; r++) {
    const t = r % context;
    for (let d = 0; d < dim; d++) out[r * dim + d] = wte[tokens[r] * dim + d] + wpe[t * dim + d];
  }
  return out;
}

/** Gradients of Σ dout ⊙ embedding(...) with respect to wte and wpe. */
export function embeddingBackwardRef(
  tokens: ArrayLike<number>,
  dout: ArrayLike<number>,
  vocab: number,
  context: number,
  dim: number,
): { dwte: Float64Array; dwpe: Float64Array } {
  const dwte = new Float64Array(vocab * dim);
  const dwpe = new Float64Array(context * dim);
  for (let r = 0; r < tokens.length; r++) {
    for (let d = 0; d < dim; d++) {
      dwte[tokens[r] * dim + d] += dout[r * dim + d];
      dwpe[(r % context) * dim + d] += dout[r * dim + d];
    }
  }
  return { dwte, dwpe };
}

export const LN_EPS = 1e-5;

/** Mean and √(biased variance + eps) of row r. */
function rowMoments(x: ArrayLike<number>, r: number, dim: number): { mean: number; std: number } {
  let mean = 0;
  for (let d = 0; d < dim; d++) mean += x[r * dim + d];
  mean /= dim;
  let variance = 0;
  for (let d = 0; d < dim; d++) variance += (x[r * dim + d] - mean) ** 2;
  variance /= dim;
  return { mean, std: Math.sqrt(variance + LN_EPS) };
}

export function layerNormRef(
  x: ArrayLike<number>,
  gain: ArrayLike<number>,
  bias: ArrayLike<number>,
  rows: number,
  dim: number,
): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    const { mean, std } = rowMoments(x, r, dim);
    for (let d = 0; d < dim; d++) y[r * dim + d] = ((x[r * dim + d] - mean) / std) * gain[d] + bias[d];
  }
  return y;
}

/** Gradients of Σ dy ⊙ layerNorm(x) with respect to x, gain and bias (chain rule through mean and variance). */
export function layerNormBackwardRef(
  x: ArrayLike<number>,
  gain: ArrayLike<number>,
  dy: ArrayLike<number>,
  rows: number,
  dim: number,
): { dx: Float64Array; dgain: Float64Array; dbias: Float64Array } {
  const dx = new Float64Array(rows * dim);
  const dgain = new Float64Array(dim);
  const dbias = new Float64Array(dim);
  for (let r = 0; r < rows; r++) {
    const row = Array.from({ length: dim }, (_, d) => x[r * dim + d]);
    const { mean, std } = rowMoments(x, r, dim);
    // y_d = (x_d − μ)/σ·g_d + b_d; dL/dx̂_d = dy_d g_d; dL/dσ² and dL/dμ by hand.
    const dxhat = row.map((_, d) => dy[r * dim + d] * gain[d]);
    let dvar = 0;
    for (let d = 0; d < dim; d++) dvar += dxhat[d] * (row[d] - mean) * -0.5 * std ** -3;
    let dmean = 0;
    for (let d = 0; d < dim; d++) dmean += -dxhat[d] / std;
    for (let d = 0; d < dim; d++) dmean += (dvar * -2 * (row[d] - mean)) / dim;
    for (let d = 0; d < dim; d++) {
      dx[r * dim + d] = dxhat[d] / std + (dvar * 2 * (row[d] - mean)) / dim + dmean / dim;
      dgain[d] += (dy[r * dim + d] * (row[d] - mean)) / std;
      dbias[d] += dy[r * dim + d];
    }
  }
  return { dx, dgain, dbias };
}

const SQRT_2_OVER_PI = Math.sqrt(2 / Math.PI);

export function geluRef(x: ArrayLike<number>): Float64Array {
  return Float64Array.from(x, (v) => 0.5 * v * (1 + Math.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v ** 3))));
}

export function geluBackwardRef(x: ArrayLike<number>, dy: ArrayLike<number>): Float64Array {
  return Float64Array.from(x, (v, i) => {
    const th = Math.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v ** 3));
    const sech2 = 1 - th * th;
    return dy[i] * (0.5 * (1 + th) + 0.5 * v * sech2 * SQRT_2_OVER_PI * (1 + 3 * 0.044715 * v * v));
  });
}

export interface AttentionShape {
  batch: number;
  context: number;
  dim: number;
  heads: number;
}

/** y [batch, context, dim] and the probabilities [batch, heads, context, context] from qkv. */
export function attentionRef(qkv: ArrayLike<number>, s: AttentionShape): { y: Float64Array; probs: Float64Array } {
  const { batch, context: T, dim, heads } = s;
  const hd = dim / heads;
  const scale = 1 / Math.sqrt(hd);
  const at = (b: number, t: number, part: number, c: number) => qkv[(b * T + t) * 3 * dim + part * dim + c];
  const y = new Float64Array(batch * T * dim);
  const probs = new Float64Array(batch * heads * T * T);
  for (let b = 0; b < batch; b++) {
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < T; i++) {
        const scores: number[] = [];
        for (let j = 0; j <= i; j++) {
          let dot = 0;
          for (let d = 0; d < hd; d++) dot += at(b, i, 0, h * hd + d) * at(b, j, 1, h * hd + d);
          scores.push(dot * scale);
        }
        const top = Math.max(...scores);
        const exps = scores.map((v) => Math.exp(v - top));
        const sum = exps.reduce((a, c) => a + c, 0);
        const row = ((b * heads + h) * T + i) * T;
        exps.forEach((e, j) => {
          probs[row + j] = e / sum;
        });
        for (let d = 0; d < hd; d++) {
          let acc = 0;
          for (let j = 0; j <= i; j++) acc += probs[row + j] * at(b, j, 2, h * hd + d);
          y[(b * T + i) * dim + h * hd + d] = acc;
        }
      }
    }
  }
  return { y, probs };
}

/** d(Σ dy ⊙ y)/d qkv by the chain rule through the weighted sum, the softmax and the scaled scores. */
export function attentionBackwardRef(qkv: ArrayLike<number>, dy: ArrayLike<number>, s: AttentionShape): Float64Array {
  const { batch, context: T, dim, heads } = s;
  const hd = dim / heads;
  const scale = 1 / Math.sqrt(hd);
  const { probs } = attentionRef(qkv, s);
  const idx = (b: number, t: number, part: number, c: number) => (b * T + t) * 3 * dim + part * dim + c;
  const dqkv = new Float64Array(qkv.length);
  for (let b = 0; b < batch; b++) {
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < T; i++) {
        const row = ((b * heads + h) * T + i) * T;
        const dyi = (d: number) => dy[(b * T + i) * dim + h * hd + d];
        // y_i = Σ_j p_ij v_j  →  dv_j += p_ij dy_i, dp_ij = dy_i · v_j
        const dp: number[] = [];
        for (let j = 0; j <= i; j++) {
          let dot = 0;
          for (let d = 0; d < hd; d++) {
            dqkv[idx(b, j, 2, h * hd + d)] += probs[row + j] * dyi(d);
            dot += dyi(d) * qkv[idx(b, j, 2, h * hd + d)];
          }
          dp.push(dot);
        }
        // softmax Jacobian: ds_ij = Σ_k dp_ik (δ_jk p_ij − p_ij p_ik)
        for (let j = 0; j <= i; j++) {
          let ds = 0;
          for (let k = 0; k <= i; k++) ds += dp[k] * ((j === k ? probs[row + j] : 0) - probs[row + j] * probs[row + k]);
          // s_ij = scale q_i·k_j
          for (let d = 0; d < hd; d++) {
            dqkv[idx(b, i, 0, h * hd + d)] += ds * scale * qkv[idx(b, j, 1, h * hd + d)];
            dqkv[idx(b, j, 1, h * hd + d)] += ds * scale * qkv[idx(b, i, 0, h * hd + d)];
          }
        }
      }
    }
  }
  return dqkv;
}

/** y = x·W + b over `rows` rows, W [k, n] row-major (GPT-2's Conv1D). */
function linearRef(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  b: ArrayLike<number>,
  rows: number,
  k: number,
  n: number,
) {
  const y = new Float64Array(rows * n);
  for (let r = 0; r < rows; r++)
    for (let j = 0; j < n; j++) {
      let acc = b[j];
      for (let i = 0; i < k; i++) acc += x[r * k + i] * w[i * n + j];
      y[r * n + j] = acc;
    }
  return y;
}

export interface TransformerRefSpec {
  vocab: number;
  context: number;
  dModel: number;
  heads: number;
  layers: number;
  mlpRatio: number;
}

/**
 * The whole decoder's logits [tokens.length, vocab] for one window, in float64, from GPT-2-named
 * tensors (`tensor(name)` returns one parameter's values): pre-LayerNorm blocks, causal attention,
 * GELU MLP, final LayerNorm, logits = ln_f(x)·wteᵀ.
 */
export function transformerLogitsRef(
  spec: TransformerRefSpec,
  tensor: (name: string) => ArrayLike<number>,
  tokens: ArrayLike<number>,
): Float64Array {
  const { vocab, dModel: d, heads, layers } = spec;
  const T = tokens.length;
  const f = spec.mlpRatio * d;
  let x = embeddingRef(tokens, tensor('wte.weight'), tensor('wpe.weight'), T, d);
  const add = (a: Float64Array, b: Float64Array) => a.map((v, i) => v + b[i]);
  for (let l = 0; l < layers; l++) {
    const p = (name: string) => tensor(`h.${l}.${name}`);
    const ln1 = layerNormRef(x, p('ln_1.weight'), p('ln_1.bias'), T, d);
    const qkv = linearRef(ln1, p('attn.c_attn.weight'), p('attn.c_attn.bias'), T, d, 3 * d);
    const { y } = attentionRef(qkv, { batch: 1, context: T, dim: d, heads });
    x = add(x, linearRef(y, p('attn.c_proj.weight'), p('attn.c_proj.bias'), T, d, d));
    const ln2 = layerNormRef(x, p('ln_2.weight'), p('ln_2.bias'), T, d);
    const fc = geluRef(linearRef(ln2, p('mlp.c_fc.weight'), p('mlp.c_fc.bias'), T, d, f));
    x = add(x, linearRef(fc, p('mlp.c_proj.weight'), p('mlp.c_proj.bias'), T, f, d));
  }
  const top = layerNormRef(x, tensor('ln_f.weight'), tensor('ln_f.bias'), T, d);
  const wte = tensor('wte.weight');
  const logits = new Float64Array(T * vocab);
  for (let t = 0; t < T; t++)
    for (let v = 0; v < vocab; v++) {
      let acc = 0;
      for (let i = 0; i < d; i++) acc += top[t * d + i] * wte[v * d + i];
      logits[t * vocab + v] = acc;
    }
  return logits;
}

/**
 * The greedy decode (arg-max, first index on a tie) of `count` tokens after `prompt`, the window sliding
 * over the last `context` tokens; and the smallest gap between the best and the second-best logit over
 * the steps (how far float32 rounding would have to move a logit to change the choice).
 */
export function greedyDecodeRef(
  spec: TransformerRefSpec,
  tensor: (name: string) => ArrayLike<number>,
  prompt: ArrayLike<number>,
  count: number,
): { tokens: number[]; minMargin: number } {
  const text = Array.from(prompt);
  const tokens: number[] = [];
  let minMargin = Number.POSITIVE_INFINITY;
  for (let i = 0; i < count; i++) {
    const window = text.slice(-spec.context);
    const all = transformerLogitsRef(spec, tensor, window);
    const row = all.subarray((window.length - 1) * spec.vocab, window.length * spec.vocab);
    let best = 0;
    for (let v = 1; v < row.length; v++) if (row[v] > row[best]) best = v;
    let second = Number.NEGATIVE_INFINITY;
    for (let v = 0; v < row.length; v++) if (v !== best) second = Math.max(second, row[v]);
    minMargin = Math.min(minMargin, row[best] - second);
    tokens.push(best);
    text.push(best);
  }
  return { tokens, minMargin };
}
