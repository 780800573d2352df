/**
 * Sampling from a language model on the kernels (Model.nextTokenLogits, kernels/model/generate.ts) against
 * the float64 reference of the whole decoder (test/support/reference-transformer.ts): the logits after
 * every position of a window, a window shorter than the context, and a greedy decode long enough to
 * slide the window. About 2 s.
 */
import { describe, expect, it } from 'vitest';
import { parameterLayout, type TransformerSpec } from '../../core/training/model-spec';
import { generate } from '../../kernels/model/generate';
import { createModel } from '../../kernels/model/model';
import { nodeGpu } from '../support/node-gpu';
import { greedyDecodeRef, transformerLogitsRef } from '../support/reference-transformer';
import { simulatedParams } from '../support/sim-trainer';

const SPEC: TransformerSpec = {
  type: 'transformer',
  name: 'gpt-generate',
  vocab: 256,
  context: 8,
  dModel: 16,
  heads: 2,
  layers: 2,
  mlpRatio: 4,
};

describe('generate', () => {
  it('logits equal the float64 reference at every position, and the greedy decode equals its decode', async () => {
    const gpu = await nodeGpu();
    const layout = parameterLayout(SPEC);
    // Seeded parameters with logits of order 1 (the admin test's simulated checkpoints).
    const params = simulatedParams(SPEC, 7);
    const byName = new Map(layout.entries.map((e) => [e.name, e]));
    const tensor = (name: string) => {
      const e = byName.get(name)!;
      return params.subarray(e.offset, e.offset + e.size);
    };
    const model = createModel(gpu, SPEC, layout, {
      maxBatch: 2,
      params,
      optimizer: { kind: 'sgd', lr: 0, momentum: 0 },
    });
    for (const tokens of [Uint32Array.from([84, 104, 101, 32, 99, 97, 116, 10]), Uint32Array.from([0, 255, 17])]) {
      const reference = transformerLogitsRef(SPEC, tensor, tokens);
      for (let p = 0; p < tokens.length; p++) {
        const got = await model.nextTokenLogits(tokens, p);
        const want = reference.subarray(p * SPEC.vocab, (p + 1) * SPEC.vocab);
        let worst = 0;
        for (let v = 0; v < SPEC.vocab; v++) worst = Math.max(worst, Math.abs(got[v] - want[v]));
        expect(worst, `window of ${tokens.length}, position ${p}`).toBeLessThan(1e-4);
      }
    }
    await expect(model.nextTokenLogits(new Uint32Array(9), 0)).rejects.toThrow(/9 tokens for a context of 8/);
    await expect(model.nextTokenLogits(Uint32Array.from([256]), 0)).rejects.toThrow(/outside the vocabulary/);

    const prompt = new TextEncoder().encode('Hi');
    const ours = await generate(model, { prompt, count: 24, temperature: 0 });
    const reference = greedyDecodeRef(SPEC, tensor, prompt, 24);
    expect(reference.minMargin).toBeGreaterThan(1e-4);
    expect(Array.from(ours)).toEqual(reference.tokens);
    await expect(generate(model, { prompt: [], count: 1, temperature: 0 })).rejects.toThrow(/at least one token/);
    model.destroy();
  });
});
