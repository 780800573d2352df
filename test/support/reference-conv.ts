/**
 * Hand-written float64 CPU references for the conv / pool / optimizer / elementwise kernels, written
 * from the textbook definitions (not from the WGSL): NHWC activations, HWIO weights, stride 1.
 */

export interface ConvShape {
  batch: number;
  height: number;
  width: number;
  inChannels: number;
  outChannels: number;
  kernel: number;
  pad: number;
}

export function convOutputHW(s: ConvShape): [number, number] {
  return [s.height + 2 * s.pad - s.kernel + 1, s.width + 2 * s.pad - s.kernel + 1];
}

/**
 * Visit every (output pixel, kernel tap) pair whose input pixel lies inside the image (zero padding
 * contributes nothing), with the flat offsets of the input pixel in x (channel 0), of the tap in w
 * (input channel 0, output channel 0) and of the output pixel in y (channel 0).
 */
function forEachTap(s: ConvShape, visit: (xAt: number, wAt: number, yAt: number) => void): void {
  const [oh, ow] = convOutputHW(s);
  const { batch, height, width, inChannels: ci, outChannels: co, kernel: k, pad } = s;
  for (let n = 0; n < batch; n++)
    for (let oy = 0; oy < oh; oy++)
      for (let ox = 0; ox < ow; ox++)
        for (let ky = 0; ky < k; ky++) {
          const iy = oy + ky - pad;
          if (iy < 0 || iy >= height) continue;
          for (let kx = 0; kx < k; kx++) {
            const ix = ox + kx - pad;
            if (ix < 0 || ix >= width) continue;
            visit(((n * height + iy) * width + ix) * ci, (ky * k + kx) * ci * co, ((n * oh + oy) * ow + ox) * co);
          }
        }
}

/** y[n,oy,ox,co] = b[co] + Σ_{ky,kx,ci} x[n, oy+ky−pad, ox+kx−pad, ci] · w[ky,kx,ci,co] (zero outside). */
export function conv2dForwardRef(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  b: ArrayLike<number> | null,
  s: ConvShape,
  relu = false,
): Float64Array {
  const [oh, ow] = convOutputHW(s);
  const { inChannels: ci, outChannels: co } = s;
  const y = new Float64Array(s.batch * oh * ow * co);
  if (b) for (let p = 0; p < y.length; p += co) for (let o = 0; o < co; o++) y[p + o] = b[o];
  forEachTap(s, (xAt, wAt, yAt) => {
    for (let i = 0; i < ci; i++) for (let o = 0; o < co; o++) y[yAt + o] += x[xAt + i] * w[wAt + i * co + o];
  });
  if (relu) for (let j = 0; j < y.length; j++) y[j] = Math.max(0, y[j]);
  return y;
}

/** dx = ∂(Σ dy ⊙ conv(x, w))/∂x: scatter each dy back through the kernel window. */
export function conv2dBackwardInputRef(dy: ArrayLike<number>, w: ArrayLike<number>, s: ConvShape): Float64Array {
  const { batch, height, width, inChannels: ci, outChannels: co } = s;
  const dx = new Float64Array(batch * height * width * ci);
  forEachTap(s, (xAt, wAt, yAt) => {
    for (let i = 0; i < ci; i++) for (let o = 0; o < co; o++) dx[xAt + i] += dy[yAt + o] * w[wAt + i * co + o];
  });
  return dx;
}

/** dw = ∂(Σ dy ⊙ conv(x, w))/∂w, summed over the batch. */
export function conv2dBackwardFilterRef(x: ArrayLike<number>, dy: ArrayLike<number>, s: ConvShape): Float64Array {
  const { inChannels: ci, outChannels: co, kernel: k } = s;
  const dw = new Float64Array(k * k * ci * co);
  forEachTap(s, (xAt, wAt, yAt) => {
    for (let i = 0; i < ci; i++) for (let o = 0; o < co; o++) dw[wAt + i * co + o] += x[xAt + i] * dy[yAt + o];
  });
  return dw;
}

export interface PoolShape {
  batch: number;
  height: number;
  width: number;
  channels: number;
}

/** 2×2 / stride-2 max pool (floor); argmax is the flat index into x of the first maximum. */
export function maxPoolForwardRef(x: ArrayLike<number>, s: PoolShape): { out: Float64Array; argmax: Uint32Array } {
  const oh = Math.floor(s.height / 2);
  const ow = Math.floor(s.width / 2);
  const c = s.channels;
  const out = new Float64Array(s.batch * oh * ow * c);
  const argmax = new Uint32Array(out.length);
  for (let n = 0; n < s.batch; n++)
    for (let oy = 0; oy < oh; oy++)
      for (let ox = 0; ox < ow; ox++)
        for (let ch = 0; ch < c; ch++) {
          let best = -Infinity;
          let at = 0;
          for (let dy = 0; dy < 2; dy++)
            for (let dx = 0; dx < 2; dx++) {
              const i = ((n * s.height + 2 * oy + dy) * s.width + 2 * ox + dx) * c + ch;
              if (x[i] > best) {
                best = x[i];
                at = i;
              }
            }
          const o = ((n * oh + oy) * ow + ox) * c + ch;
          out[o] = best;
          argmax[o] = at;
        }
  return { out, argmax };
}

/** Gradient of Σ dy ⊙ maxpool(x) with respect to x (the max's input takes the gradient). */
export function maxPoolBackwardRef(x: ArrayLike<number>, dy: ArrayLike<number>, s: PoolShape): Float64Array {
  const { argmax } = maxPoolForwardRef(x, s);
  const dx = new Float64Array(s.batch * s.height * s.width * s.channels);
  for (let o = 0; o < argmax.length; o++) dx[argmax[o]] += dy[o];
  return dx;
}

export interface AdamWState {
  params: Float64Array;
  m: Float64Array;
  v: Float64Array;
}

export interface AdamWRefHyper {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
}

/** One torch.optim.AdamW step (amsgrad off) in float64, in place; `grads` already scaled to means. */
export function adamwStepRef(state: AdamWState, grads: ArrayLike<number>, h: AdamWRefHyper, step: number): void {
  const bc1 = 1 - h.beta1 ** step;
  const bc2 = 1 - h.beta2 ** step;
  for (let i = 0; i < state.params.length; i++) {
    const g = grads[i];
    state.params[i] *= 1 - h.lr * h.weightDecay;
    state.m[i] = h.beta1 * state.m[i] + (1 - h.beta1) * g;
    state.v[i] = h.beta2 * state.v[i] + (1 - h.beta2) * g * g;
    const denom = Math.sqrt(state.v[i]) / Math.sqrt(bc2) + h.eps;
    state.params[i] -= (h.lr / bc1) * (state.m[i] / denom);
  }
}

/**
 * One torch.optim.SGD step (dampening 0, nesterov off) in float64, in place. `velocity` is null
 * before the first step, as torch's momentum_buffer, which then starts as a clone of the gradient.
 */
export function sgdStepRef(
  state: { params: Float64Array; velocity: Float64Array | null },
  grads: ArrayLike<number>,
  h: { lr: number; momentum: number; weightDecay: number },
): void {
  const n = state.params.length;
  const d = new Float64Array(n);
  for (let i = 0; i < n; i++) d[i] = grads[i] + h.weightDecay * state.params[i];
  if (h.momentum !== 0) {
    if (state.velocity === null) {
      state.velocity = Float64Array.from(d);
    } else {
      for (let i = 0; i < n; i++) state.velocity[i] = h.momentum * state.velocity[i] + d[i];
    }
    for (let i = 0; i < n; i++) d[i] = state.velocity[i];
  }
  for (let i = 0; i < n; i++) state.params[i] -= h.lr * d[i];
}
