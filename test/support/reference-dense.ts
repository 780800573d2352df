/**
 * Float64 CPU references for the dense-layer kernels, written from the math (never from the WGSL):
 * plain loops over row-major arrays, accumulating in float64.
 */

export interface MatmulRefOptions {
  /** a is stored [k,m]. */
  transA?: boolean;
  /** b is stored [n,k]. */
  transB?: boolean;
  /** Added to each row (length n). */
  bias?: ArrayLike<number>;
  /** The previous out[m,n]; the product is added to it (before bias and ReLU). */
  accumulateInto?: ArrayLike<number>;
  relu?: boolean;
}

/** out[i,j] = (prev[i,j] +) Σ_p op(a)[i,p]·op(b)[p,j] (+ bias[j]), then max(·,0) if relu. */
export function matmulRef(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  m: number,
  n: number,
  k: number,
  opts: MatmulRefOptions = {},
): Float64Array {
  // Materialise op(a) as [m,k] and op(b)ᵀ as [n,k] so the inner loop is a contiguous dot product.
  const rowsA = opts.transA ? transpose(a, k, m) : Float64Array.from(a);
  const colsB = opts.transB ? Float64Array.from(b) : transpose(b, k, n);
  const out = new Float64Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let p = 0; p < k; p++) s += rowsA[i * k + p] * colsB[j * k + p];
      if (opts.accumulateInto) s += opts.accumulateInto[i * n + j];
      if (opts.bias) s += opts.bias[j];
      out[i * n + j] = opts.relu ? Math.max(s, 0) : s;
    }
  }
  return out;
}

/** Transpose of a row-major [rows, cols] array. */
export function transpose(x: ArrayLike<number>, rows: number, cols: number): Float64Array {
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = x[r * cols + c];
  return out;
}

export function biasAddRef(x: ArrayLike<number>, bias: ArrayLike<number>, rows: number, cols: number): Float64Array {
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[r * cols + c] = x[r * cols + c] + bias[c];
  return out;
}

/** dbias[c] = Σ_r dy[r,c]. */
export function biasGradRef(dy: ArrayLike<number>, rows: number, cols: number): Float64Array {
  const out = new Float64Array(cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c] += dy[r * cols + c];
  return out;
}

export function reluRef(x: ArrayLike<number>): Float64Array {
  return Float64Array.from(x, (v) => Math.max(v, 0));
}

/** dx = dy where the ReLU output y is positive, else 0. */
export function reluBackwardRef(y: ArrayLike<number>, dy: ArrayLike<number>): Float64Array {
  return Float64Array.from(dy, (g, i) => (y[i] > 0 ? g : 0));
}

/** log Σ_j exp(logits[r, j]), computed stably (the row's maximum taken out first). */
function logSumExp(logits: ArrayLike<number>, r: number, classes: number): number {
  let top = -Infinity;
  for (let j = 0; j < classes; j++) top = Math.max(top, logits[r * classes + j]);
  let sum = 0;
  for (let j = 0; j < classes; j++) sum += Math.exp(logits[r * classes + j] - top);
  return Math.log(sum) + top;
}

/** Σ_r −log softmax(logits_r)[labels_r], computed stably with log-sum-exp in float64. */
export function softmaxCrossEntropyLossRef(
  logits: ArrayLike<number>,
  labels: ArrayLike<number>,
  rows: number,
  classes: number,
): number {
  let loss = 0;
  for (let r = 0; r < rows; r++) loss += logSumExp(logits, r, classes) - logits[r * classes + labels[r]];
  return loss;
}

/** softmax(logits_r) − onehot(labels_r) per row: the analytic gradient of the summed loss. */
export function softmaxCrossEntropyGradRef(
  logits: ArrayLike<number>,
  labels: ArrayLike<number>,
  rows: number,
  classes: number,
): Float64Array {
  const out = new Float64Array(rows * classes);
  for (let r = 0; r < rows; r++) {
    const lse = logSumExp(logits, r, classes);
    for (let j = 0; j < classes; j++) {
      out[r * classes + j] = Math.exp(logits[r * classes + j] - lse) - (j === labels[r] ? 1 : 0);
    }
  }
  return out;
}

/** Rows whose first maximal logit is at the label's index. */
export function countCorrectRef(
  logits: ArrayLike<number>,
  labels: ArrayLike<number>,
  rows: number,
  classes: number,
): number {
  let correct = 0;
  for (let r = 0; r < rows; r++) {
    let best = 0;
    for (let j = 1; j < classes; j++) if (logits[r * classes + j] > logits[r * classes + best]) best = j;
    if (best === labels[r]) correct++;
  }
  return correct;
}

/** Σ g⊙y: a scalar whose gradient with respect to y is g, for finite-difference checks of backward ops. */
export function dot(g: ArrayLike<number>, y: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < g.length; i++) s += g[i] * y[i];
  return s;
}
