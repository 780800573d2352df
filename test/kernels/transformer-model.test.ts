/**
 * The transformer as a model: gpt-tiny's step runs and is bit-reproducible, and a small transformer
 * learns generated text — its held-out loss in bits per byte falls well below the text's unigram
 * entropy (the best any model without context can do), which only attention over the context allows.
 */
import { describe, expect, it } from 'vitest';
import { GPT_TINY_SPEC, parameterLayout, type TransformerSpec } from '../../core/training/model-spec';
import { createModel } from '../../kernels/model/model';
import { nodeGpu } from '../support/node-gpu';
import { generatedText, unigramBits } from '../support/generated-text';
import { mulberry32 } from '../support/rng';

const ADAMW = { kind: 'adamw', lr: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.01 } as const;

/** `count` windows of context + 1 bytes starting at the given offsets. */
function windowsAt(text: Uint8Array, starts: number[], context: number): Uint8Array {
  const out = new Uint8Array(starts.length * (context + 1));
  starts.forEach((s, i) => {
    out.set(text.subarray(s, s + context + 1), i * (context + 1));
  });
  return out;
}

describe('transformer model', () => {
  it('gpt-tiny: one step has loss ≈ ln 256 per byte and bit-identical gradients on repeat', async () => {
    const gpu = await nodeGpu();
    const layout = parameterLayout(GPT_TINY_SPEC);
    const model = createModel(gpu, GPT_TINY_SPEC, layout, { maxBatch: 1, seed: 3, optimizer: ADAMW });
    const text = generatedText(1, 4096);
    const windows = windowsAt(text, [1000], GPT_TINY_SPEC.context);
    const start = performance.now();
    model.forwardBackwardTokens(windows, 1);
    const loss = await model.readLossSum();
    const ms = performance.now() - start;
    const grads = await model.readGradients();
    model.forwardBackwardTokens(windows, 1);
    const again = await model.readGradients();
    model.destroy();
    // GPT-2's count: wte and wpe; per block the matrices (3 + 1 + 2r)·d² and the biases and LayerNorm
    // gains and biases (3 + 1 + r + 1 + 4)·d, with r the MLP ratio; ln_f's 2d.
    const { vocab, context, dModel: d, layers, mlpRatio: r } = GPT_TINY_SPEC;
    const gpt2Count = (vocab + context) * d + layers * ((4 + 2 * r) * d * d + (9 + r) * d) + 2 * d;
    expect(layout.parameterCount).toBe(gpt2Count);
    expect(layout.parameterCount).toBe(842_496);
    expect(Math.abs(loss - Math.log(256))).toBeLessThan(0.3);
    expect(Buffer.from(again.buffer).equals(Buffer.from(grads.buffer))).toBe(true);
    console.log(`gpt-tiny forward+backward, 1 window of 128 bytes: ${ms.toFixed(0)} ms (incl. first-use JIT)`);
  });

  it('a small transformer learns generated text far below its unigram entropy', async () => {
    const gpu = await nodeGpu();
    const spec: TransformerSpec = {
      type: 'transformer',
      name: 'gpt-learn',
      vocab: 256,
      context: 16,
      dModel: 32,
      heads: 2,
      layers: 2,
      mlpRatio: 4,
    };
    const text = generatedText(5, 40_000);
    const split = Math.floor(text.length * 0.95);
    const [train, test] = [text.subarray(0, split), text.subarray(split)];
    const unigram = unigramBits(text);
    const batch = 8;
    const model = createModel(gpu, spec, parameterLayout(spec), { maxBatch: batch, seed: 1, optimizer: ADAMW });
    const rand = mulberry32(9);
    const testStarts = Array.from({ length: 32 }, (_, i) => i * Math.floor((test.length - spec.context - 1) / 32));
    const evalBits = async () => {
      const r = await model.evaluateTokens(windowsAt(test, testStarts, spec.context), testStarts.length);
      return r.lossSum / r.count / Math.LN2;
    };
    const initial = await evalBits();
    const curve: number[] = [];
    const start = performance.now();
    for (let step = 1; step <= 160; step++) {
      const starts = Array.from({ length: batch }, () => Math.floor(rand() * (train.length - spec.context - 1)));
      model.trainTokens(windowsAt(train, starts, spec.context), batch);
      if (step % 40 === 0) curve.push(await evalBits());
    }
    const seconds = (performance.now() - start) / 1000;
    model.destroy();
    console.log(
      `unigram ${unigram.toFixed(2)} bits/byte; held-out ${initial.toFixed(2)} → ${curve.map((b) => b.toFixed(2)).join(' → ')} in ${seconds.toFixed(1)} s`,
    );
    // Untrained, the model is near uniform over the vocabulary: log2(256) = 8 bits per byte.
    expect(initial).toBeGreaterThan(Math.log2(spec.vocab) - 1);
    expect(curve[curve.length - 1]).toBeLessThan(0.6 * unigram);
  });
});
