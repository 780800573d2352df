/**
 * Text from a trained language model (the admin page's Sample button): autoregressive decoding, one
 * forward pass per new token on the training kernels (`Model.nextTokenLogits`), the next token drawn
 * on the CPU from softmax(logits / temperature).
 *
 * The window: while the text is shorter than the context it starts at position 0 and the logits are
 * read at its last position; after that it slides (the last `context` tokens). Temperature 0 is the
 * greedy decode: the arg-max, the lowest index on a tie (the limit of temperature → 0 with ties broken
 * by index), so the result is a pure function of the parameters and the prompt.
 */
import { isTransformer } from '../../core/training/model-spec';
import type { Model } from './model';

/** The index of the largest value; the first on a tie. NaN is never chosen while a number exists. */
export function argmax(values: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best] || Number.isNaN(values[best])) best = i;
  return best;
}

/**
 * The next token from `logits`: the arg-max at temperature 0, otherwise a draw from softmax(logits / T)
 * with `random()` uniform in [0, 1). Throws on a negative or non-finite temperature.
 */
export function pickToken(logits: ArrayLike<number>, temperature: number, random: () => number): number {
  if (!(temperature >= 0) || !Number.isFinite(temperature))
    throw new Error(`temperature ${temperature} must be a finite number ≥ 0`);
  const top = argmax(logits);
  if (temperature === 0) return top;
  const weights = new Float64Array(logits.length);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) {
    const w = Math.exp((logits[i] - logits[top]) / temperature);
    weights[i] = Number.isFinite(w) ? w : 0;
    sum += weights[i];
  }
  let u = random() * sum;
  for (let i = 0; i < weights.length; i++) {
    u -= weights[i];
    if (u < 0 && weights[i] > 0) return i;
  }
  return top;
}

export interface GenerateOptions {
  /** Tokens to continue (at least one; each below the vocabulary). */
  prompt: ArrayLike<number>;
  /** New tokens to generate. */
  count: number;
  temperature: number;
  /** Uniform in [0, 1) (default Math.random); unused at temperature 0. */
  random?: () => number;
  /** Called after each new token (e.g. to show progress). */
  onToken?: (token: number, index: number) => void;
}

/** `count` new tokens after `prompt` (see the module comment for the window). */
export async function generate(model: Model, options: GenerateOptions): Promise<Uint32Array> {
  const spec = model.spec;
  if (!isTransformer(spec)) throw new Error(`generate: ${spec.name} is not a language model`);
  const { prompt, count, temperature } = options;
  if (prompt.length < 1) throw new Error('generate: the prompt needs at least one token');
  if (!Number.isInteger(count) || count < 0) throw new Error(`generate: count ${count} must be a whole number`);
  const text = Array.from(prompt);
  for (const t of text)
    if (!Number.isInteger(t) || t < 0 || t >= spec.vocab)
      throw new Error(`generate: prompt token ${t} outside the vocabulary of ${spec.vocab}`);
  const random = options.random ?? Math.random;
  const out = new Uint32Array(count);
  for (let i = 0; i < count; i++) {
    const window = Uint32Array.from(text.slice(-spec.context));
    const logits = await model.nextTokenLogits(window, window.length - 1);
    const token = pickToken(logits, temperature, random);
    out[i] = token;
    text.push(token);
    options.onToken?.(token, i);
  }
  return out;
}
