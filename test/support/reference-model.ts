/**
 * A float64 CPU forward/backward of a model spec and the two optimizers, written by hand from the
 * definitions (loops over indices, no shared code with the WGSL or kernels/), as the reference the
 * GPU model is tested against. Conventions follow core/training/model-spec.ts: NHWC activations,
 * dense W [in, out], conv W [kh, kw, cin, cout], parameters in one flat buffer at `layout` offsets.
 * The loss is the SUM of per-sample cross-entropies and gradients are sums over samples.
 */
import type { SequentialSpec as ModelSpec, ParamLayout } from '../../core/training/model-spec';

export interface ReferenceResult {
  lossSum: number;
  /** [batch, classes] */
  logits: Float64Array;
  /** Samples whose arg-max logit (first on ties) equals the label. */
  correct: number;
  /** Same flat layout as the parameters; padding stays 0. */
  grads: Float64Array;
}

interface Cache {
  /** Layer input, [batch, ...inShape]. */
  input: Float64Array;
  inShape: number[];
  /** Layer output after activation. */
  output: Float64Array;
  outShape: number[];
  /** Max-pool: flat input index of each output's maximum. */
  argmax?: Int32Array;
}

const product = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

export function referenceForwardBackward(
  spec: ModelSpec,
  layout: ParamLayout,
  params: ArrayLike<number>,
  x: ArrayLike<number>,
  labels: ArrayLike<number>,
  batch: number,
  opts: {
    /**
     * Round a dense layer's matmul operands (its input and weight, in the forward and in the backward
     * products that reuse them) with this, as the f16 mode stores them as halves; gradients stay exact.
     */
    roundDenseOperands?: (v: number) => number;
  } = {},
): ReferenceResult {
  const p = Float64Array.from(params);
  const round = opts.roundDenseOperands ?? ((v: number) => v);
  const grads = new Float64Array(layout.totalElements);
  const entry = (layer: number, kind: 'weight' | 'bias') => {
    const e = layout.entries.find((en) => en.layer === layer && en.kind === kind);
    if (!e) throw new Error(`reference: no ${kind} for layer ${layer}`);
    return e.offset;
  };

  let shape: number[] = [...spec.input];
  let act = Float64Array.from({ length: batch * product(shape) }, (_, i) => x[i]);
  const caches: Cache[] = [];

  spec.layers.forEach((layer, li) => {
    const input = act;
    const inShape = shape;
    if (layer.type === 'dense') {
      const nIn = product(inShape);
      const nOut = layer.units;
      const w = entry(li, 'weight');
      const bo = entry(li, 'bias');
      const out = new Float64Array(batch * nOut);
      for (let b = 0; b < batch; b++) {
        for (let o = 0; o < nOut; o++) {
          let s = p[bo + o];
          for (let i = 0; i < nIn; i++) s += round(input[b * nIn + i]) * round(p[w + i * nOut + o]);
          out[b * nOut + o] = layer.activation === 'relu' ? Math.max(0, s) : s;
        }
      }
      act = out;
      shape = [nOut];
    } else if (layer.type === 'conv2d') {
      const [H, W, C] = inShape;
      const k = layer.kernel;
      const pad = layer.padding === 'same' ? (k - 1) / 2 : 0;
      const OH = H + 2 * pad - k + 1;
      const OW = W + 2 * pad - k + 1;
      const F = layer.filters;
      const w = entry(li, 'weight');
      const bo = entry(li, 'bias');
      const out = new Float64Array(batch * OH * OW * F);
      for (let b = 0; b < batch; b++) {
        for (let oh = 0; oh < OH; oh++) {
          for (let ow = 0; ow < OW; ow++) {
            for (let f = 0; f < F; f++) {
              let s = p[bo + f];
              for (let kh = 0; kh < k; kh++) {
                const ih = oh + kh - pad;
                if (ih < 0 || ih >= H) continue;
                for (let kw = 0; kw < k; kw++) {
                  const iw = ow + kw - pad;
                  if (iw < 0 || iw >= W) continue;
                  for (let c = 0; c < C; c++)
                    s += input[((b * H + ih) * W + iw) * C + c] * p[w + ((kh * k + kw) * C + c) * F + f];
                }
              }
              out[((b * OH + oh) * OW + ow) * F + f] = layer.activation === 'relu' ? Math.max(0, s) : s;
            }
          }
        }
      }
      act = out;
      shape = [OH, OW, F];
    } else {
      const [H, W, C] = inShape;
      const OH = Math.floor(H / 2);
      const OW = Math.floor(W / 2);
      const out = new Float64Array(batch * OH * OW * C);
      const argmax = new Int32Array(out.length);
      for (let b = 0; b < batch; b++) {
        for (let oh = 0; oh < OH; oh++) {
          for (let ow = 0; ow < OW; ow++) {
            for (let c = 0; c < C; c++) {
              let best = -Infinity;
              let bestIndex = -1;
              for (let dh = 0; dh < 2; dh++) {
                for (let dw = 0; dw < 2; dw++) {
                  const idx = ((b * H + 2 * oh + dh) * W + 2 * ow + dw) * C + c;
                  if (input[idx] > best) {
                    best = input[idx];
                    bestIndex = idx;
                  }
                }
              }
              const o = ((b * OH + oh) * OW + ow) * C + c;
              out[o] = best;
              argmax[o] = bestIndex;
            }
          }
        }
      }
      caches.push({ input, inShape, output: out, outShape: [OH, OW, C], argmax });
      act = out;
      shape = [OH, OW, C];
      return;
    }
    caches.push({ input, inShape, output: act, outShape: shape });
  });

  // Softmax cross-entropy, summed over the batch; d(loss)/d(logits) = softmax − onehot per row.
  const classes = spec.classes;
  const logits = act;
  let lossSum = 0;
  let correct = 0;
  let grad = new Float64Array(batch * classes);
  for (let b = 0; b < batch; b++) {
    let max = -Infinity;
    let arg = 0;
    for (let c = 0; c < classes; c++) {
      if (logits[b * classes + c] > max) {
        max = logits[b * classes + c];
        arg = c;
      }
    }
    if (arg === labels[b]) correct++;
    let sum = 0;
    for (let c = 0; c < classes; c++) sum += Math.exp(logits[b * classes + c] - max);
    const logSum = max + Math.log(sum);
    lossSum += logSum - logits[b * classes + labels[b]];
    for (let c = 0; c < classes; c++)
      grad[b * classes + c] = Math.exp(logits[b * classes + c] - logSum) - (c === labels[b] ? 1 : 0);
  }

  for (let li = spec.layers.length - 1; li >= 0; li--) {
    const layer = spec.layers[li];
    const cache = caches[li];
    const dOut = grad;
    if (layer.type === 'maxpool2') {
      const dIn = new Float64Array(cache.input.length);
      for (let o = 0; o < dOut.length; o++) dIn[cache.argmax![o]] += dOut[o];
      grad = dIn;
      continue;
    }
    // ReLU: the output is max(0, z), so dz = dy where the output is positive.
    const dz = layer.activation === 'relu' ? dOut.map((g, i) => (cache.output[i] > 0 ? g : 0)) : dOut;
    const w = entry(li, 'weight');
    const bo = entry(li, 'bias');
    const dIn = new Float64Array(cache.input.length);
    if (layer.type === 'dense') {
      const nIn = product(cache.inShape);
      const nOut = layer.units;
      for (let b = 0; b < batch; b++) {
        for (let o = 0; o < nOut; o++) {
          const g = dz[b * nOut + o];
          grads[bo + o] += g;
          for (let i = 0; i < nIn; i++) {
            grads[w + i * nOut + o] += round(cache.input[b * nIn + i]) * g;
            dIn[b * nIn + i] += g * round(p[w + i * nOut + o]);
          }
        }
      }
    } else {
      const [H, W, C] = cache.inShape;
      const [OH, OW, F] = cache.outShape;
      const k = layer.kernel;
      const pad = layer.padding === 'same' ? (k - 1) / 2 : 0;
      for (let b = 0; b < batch; b++) {
        for (let oh = 0; oh < OH; oh++) {
          for (let ow = 0; ow < OW; ow++) {
            for (let f = 0; f < F; f++) {
              const g = dz[((b * OH + oh) * OW + ow) * F + f];
              grads[bo + f] += g;
              for (let kh = 0; kh < k; kh++) {
                const ih = oh + kh - pad;
                if (ih < 0 || ih >= H) continue;
                for (let kw = 0; kw < k; kw++) {
                  const iw = ow + kw - pad;
                  if (iw < 0 || iw >= W) continue;
                  for (let c = 0; c < C; c++) {
                    const xi = ((b * H + ih) * W + iw) * C + c;
                    const wi = w + ((kh * k + kw) * C + c) * F + f;
                    grads[wi] += cache.input[xi] * g;
                    dIn[xi] += g * p[wi];
                  }
                }
              }
            }
          }
        }
      }
    }
    grad = dIn;
  }
  return { lossSum, logits, correct, grads };
}

export interface ReferenceAdamWHyper {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  gradScale: number;
  /** 1-based step. */
  t: number;
}

/** torch.optim.AdamW, one step, float64; returns new arrays. */
export function referenceAdamW(
  params: ArrayLike<number>,
  grads: ArrayLike<number>,
  m: ArrayLike<number>,
  v: ArrayLike<number>,
  h: ReferenceAdamWHyper,
): { params: Float64Array; m: Float64Array; v: Float64Array } {
  const n = params.length;
  const out = { params: new Float64Array(n), m: new Float64Array(n), v: new Float64Array(n) };
  const bc1 = 1 - h.beta1 ** h.t;
  const bc2 = 1 - h.beta2 ** h.t;
  for (let i = 0; i < n; i++) {
    const g = grads[i] * h.gradScale;
    let p = params[i] * (1 - h.lr * h.weightDecay);
    const mi = h.beta1 * m[i] + (1 - h.beta1) * g;
    const vi = h.beta2 * v[i] + (1 - h.beta2) * g * g;
    p -= (h.lr * (mi / bc1)) / (Math.sqrt(vi / bc2) + h.eps);
    out.params[i] = p;
    out.m[i] = mi;
    out.v[i] = vi;
  }
  return out;
}

/** torch.optim.SGD with momentum (dampening 0, not Nesterov), one step, float64. */
export function referenceSgdMomentum(
  params: ArrayLike<number>,
  grads: ArrayLike<number>,
  velocity: ArrayLike<number>,
  h: { lr: number; momentum: number; weightDecay: number; gradScale: number },
): { params: Float64Array; velocity: Float64Array } {
  const n = params.length;
  const out = { params: new Float64Array(n), velocity: new Float64Array(n) };
  for (let i = 0; i < n; i++) {
    const g = grads[i] * h.gradScale + h.weightDecay * params[i];
    out.velocity[i] = h.momentum * velocity[i] + g;
    out.params[i] = params[i] - h.lr * out.velocity[i];
  }
  return out;
}

/**
 * Compare flat gradients (or parameters) tensor by tensor, with two criteria that both must hold:
 * norm-wise ‖got − ref‖₂ ≤ rtol·‖ref‖₂ per tensor, and element-wise |got − ref| ≤ rtol·(|ref| + rms(ref))
 * (relative, with the tensor's RMS as the scale for elements that are nearly zero after cancellation,
 * where float32 cannot give a relative 1e-4). Throws naming the tensor and the first mismatches.
 */
export function expectTensorsClose(
  got: ArrayLike<number>,
  ref: ArrayLike<number>,
  layout: Pick<ParamLayout, 'entries'>,
  opts: { rtol?: number; label?: string } = {},
): void {
  const rtol = opts.rtol ?? 1e-4;
  const problems: string[] = [];
  for (const e of layout.entries) {
    let diff2 = 0;
    let ref2 = 0;
    for (let i = 0; i < e.size; i++) {
      const d = got[e.offset + i] - ref[e.offset + i];
      diff2 += d * d;
      ref2 += ref[e.offset + i] ** 2;
    }
    const rms = Math.sqrt(ref2 / e.size);
    if (!(Math.sqrt(diff2) <= rtol * Math.sqrt(ref2))) {
      problems.push(
        `${e.name}: norm-wise relative error ${(Math.sqrt(diff2) / Math.sqrt(ref2)).toExponential(2)} > ${rtol}`,
      );
    }
    const bad: string[] = [];
    let count = 0;
    for (let i = 0; i < e.size; i++) {
      const g = got[e.offset + i];
      const r = ref[e.offset + i];
      if (!(Math.abs(g - r) <= rtol * (Math.abs(r) + rms))) {
        count++;
        if (bad.length < 4) bad.push(`[${i}] got ${g} ref ${r}`);
      }
    }
    if (count > 0)
      problems.push(
        `${e.name}: ${count}/${e.size} elements outside rtol·(|ref| + rms ${rms.toExponential(2)}): ${bad.join(', ')}`,
      );
  }
  if (problems.length > 0)
    throw new Error(`${opts.label ?? 'tensors'} differ from the reference:\n  ${problems.join('\n  ')}`);
}

/** |got − ref| ≤ rtol·|ref| for a scalar such as the summed loss. */
export function expectScalarClose(got: number, ref: number, rtol: number, label: string): void {
  if (!(Math.abs(got - ref) <= rtol * Math.abs(ref))) {
    throw new Error(
      `${label}: got ${got}, reference ${ref} (relative error ${(Math.abs(got - ref) / Math.abs(ref)).toExponential(2)} > ${rtol})`,
    );
  }
}
