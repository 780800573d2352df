/**
 * One training step of a 2-block transformer on our kernels against an independent implementation:
 * the same model written with TensorFlow.js ops (CPU backend, float32), gradients by tf.variableGrads.
 * The loss (a sum over samples of each window's mean next-token cross-entropy) and every gradient must
 * agree within 1e-4 relative (norm-wise per tensor and element-wise against |ref| + the tensor's RMS,
 * see expectTensorsClose). Then the AdamW step: decay only on the matrices.
 */
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { parameterLayout, type TransformerSpec } from '../../core/training/model-spec';
import { createModel } from '../../kernels/model/model';
import type { Gpu } from '../../kernels/runtime';
import { nodeGpu, skipWithoutNodeGpu } from '../support/node-gpu';
import { expectScalarClose, expectTensorsClose } from '../support/reference-model';
import { tfTransformerStep } from '../support/reference-transformer-tfjs';
import { mulberry32 } from '../support/rng';

const SPEC: TransformerSpec = {
  type: 'transformer',
  name: 'gpt-test',
  vocab: 256,
  context: 24,
  dModel: 32,
  heads: 4,
  layers: 2,
  mlpRatio: 4,
};
const BATCH = 3;

// The device is taken in beforeAll, which runs before the per-test skip: skip the suite here.
describe.skipIf(await skipWithoutNodeGpu())('transformer step against TensorFlow.js (CPU backend)', () => {
  let gpu: Gpu;
  beforeAll(async () => {
    gpu = await nodeGpu();
    await tf.setBackend('cpu');
    await tf.ready();
  });

  it('agrees on the loss and every gradient within 1e-4, and AdamW decays only the matrices', async () => {
    const layout = parameterLayout(SPEC);
    const opt = { kind: 'adamw', lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1 } as const;
    const model = createModel(gpu, SPEC, layout, { maxBatch: BATCH + 1, seed: 7, optimizer: opt });
    const rand = mulberry32(2025);
    const windows = Uint32Array.from({ length: BATCH * (SPEC.context + 1) }, () => Math.floor(rand() * SPEC.vocab));
    // Perturb gains and biases away from 1 and 0 so their gradients and uses are all exercised.
    const params = (await model.readParams()).map((p, i) => p + 0.05 * Math.sin(i));
    const start = performance.now();
    const model2 = createModel(gpu, SPEC, layout, { maxBatch: BATCH + 1, params, optimizer: opt });
    model.destroy();
    model2.forwardBackwardTokens(windows, BATCH);
    const [lossSum, grads] = [await model2.readLossSum(), await model2.readGradients()];
    const ours = performance.now() - start;
    const ref = await tfTransformerStep(SPEC, layout, params, windows, BATCH);

    expectScalarClose(lossSum, ref.loss, 1e-4, 'loss vs TF.js');
    expectTensorsClose(grads, ref.grads, layout, { rtol: 1e-4, label: 'gradients vs TF.js' });
    // The mean next-token loss of random tokens is near ln(vocab) at initialisation.
    expect(lossSum / BATCH).toBeGreaterThan(Math.log(SPEC.vocab) - 0.5);
    console.log(
      `transformer vs TF.js: loss ${lossSum} vs ${ref.loss} (rel ${(Math.abs(lossSum - ref.loss) / ref.loss).toExponential(2)}), ` +
        `max |Δgrad| ${Math.max(...Array.from(grads, (g, i) => Math.abs(g - ref.grads[i]))).toExponential(2)}, ours ${ours.toFixed(0)} ms`,
    );

    // AdamW's first step on the summed gradients, by hand: p·(1 − lr·wd·[matrix]) − lr·sign-like ĝ/(|ĝ| + eps).
    model2.applyOptimizer(BATCH);
    const after = await model2.readParams();
    model2.destroy();
    for (const e of layout.entries) {
      const decay = e.shape.length === 2 ? opt.weightDecay : 0;
      for (let i = e.offset; i < e.offset + e.size; i += 7) {
        const g = grads[i] / BATCH;
        const expected = params[i] * (1 - opt.lr * decay) - (opt.lr * g) / (Math.abs(g) + opt.eps);
        expect(Math.abs(after[i] - expected), `${e.name}[${i - e.offset}]`).toBeLessThan(
          2e-6 + 1e-3 * Math.abs((opt.lr * g) / (Math.abs(g) + opt.eps)),
        );
      }
    }
  });
});
