/**
 * One training step of a 2-block transformer on our kernels against an independent implementation:
 * the same model written with TensorFlow.js ops (CPU backend, float32), gradients by tf.variableGrads.
 * The loss (a sum over samples of each window's mean next-token cross-entropy) and every gradient must
 * agree within 1e-4 relative (norm-wise per tensor and element-wise against |ref| + the tensor's RMS,
 * see expectTensorsClose). Then the AdamW step: decay only on the matrices.
 */
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { parameterLayout, type ParamLayout, type TransformerSpec } from '../../coordinator/core/model-spec';
import { createModel } from '../../kernels/model';
import type { Gpu } from '../../kernels/runtime';
import { nodeGpu } from '../support/node-gpu';
import { expectScalarClose, expectTensorsClose } from '../support/reference-model';
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

/** The model in TF.js ops, from the definitions (GPT-2's block), returning the summed loss. */
function tfLoss(spec: TransformerSpec, v: Record<string, tf.Variable>, windows: Uint32Array, batch: number): tf.Scalar {
  const { context: T, dModel: D, heads: H, vocab: V } = spec;
  const hd = D / H;
  const inputs: number[] = [];
  const targets: number[] = [];
  for (let b = 0; b < batch; b++) {
    for (let t = 0; t < T; t++) {
      inputs.push(windows[b * (T + 1) + t]);
      targets.push(windows[b * (T + 1) + t + 1]);
    }
  }
  const ln = (x: tf.Tensor2D, name: string) => {
    const { mean, variance } = tf.moments(x, -1, true);
    const xhat = tf.div(tf.sub(x, mean), tf.sqrt(tf.add(variance, 1e-5)));
    return tf.add(tf.mul(xhat, v[`${name}.weight`]), v[`${name}.bias`]) as tf.Tensor2D;
  };
  const linear = (x: tf.Tensor2D, name: string) =>
    tf.add(tf.matMul(x, v[`${name}.weight`] as tf.Tensor2D), v[`${name}.bias`]) as tf.Tensor2D;
  const heads = (x: tf.Tensor) => tf.transpose(tf.reshape(x, [batch, T, H, hd]), [0, 2, 1, 3]);
  // Causal mask: 0 on and below the diagonal, −1e9 above (exp underflows to exactly 0).
  const mask = tf.mul(tf.sub(1, tf.linalg.bandPart(tf.ones([T, T]), -1, 0)), -1e9);
  let x = tf.reshape(
    tf.add(tf.reshape(tf.gather(v['wte.weight'], tf.tensor1d(inputs, 'int32')), [batch, T, D]), v['wpe.weight']),
    [batch * T, D],
  ) as tf.Tensor2D;
  for (let l = 0; l < spec.layers; l++) {
    const h = `h.${l}`;
    const [q, k, val] = tf.split(linear(ln(x, `${h}.ln_1`), `${h}.attn.c_attn`), 3, 1);
    const scores = tf.add(tf.mul(tf.matMul(heads(q), heads(k), false, true), 1 / Math.sqrt(hd)), mask);
    const y = tf.reshape(tf.transpose(tf.matMul(tf.softmax(scores), heads(val)), [0, 2, 1, 3]), [batch * T, D]);
    x = tf.add(x, linear(y as tf.Tensor2D, `${h}.attn.c_proj`));
    const fc = linear(ln(x, `${h}.ln_2`), `${h}.mlp.c_fc`);
    const inner = tf.mul(Math.sqrt(2 / Math.PI), tf.add(fc, tf.mul(0.044715, tf.pow(fc, 3))));
    const gelu = tf.mul(tf.mul(0.5, fc), tf.add(1, tf.tanh(inner))) as tf.Tensor2D;
    x = tf.add(x, linear(gelu, `${h}.mlp.c_proj`));
  }
  const logits = tf.matMul(ln(x, 'ln_f'), v['wte.weight'] as tf.Tensor2D, false, true);
  const onehot = tf.oneHot(tf.tensor1d(targets, 'int32'), V);
  return tf.div(tf.neg(tf.sum(tf.mul(onehot, tf.logSoftmax(logits)))), T) as tf.Scalar;
}

async function tfStep(layout: ParamLayout, params: Float32Array, windows: Uint32Array) {
  const variables: Record<string, tf.Variable> = {};
  for (const e of layout.entries) {
    variables[e.name] = tf.variable(tf.tensor(params.subarray(e.offset, e.offset + e.size), e.shape), true, e.name);
  }
  const { value, grads } = tf.variableGrads(() => tfLoss(SPEC, variables, windows, BATCH));
  const loss = (await value.data())[0];
  const flat = new Float64Array(layout.totalElements);
  for (const e of layout.entries) flat.set(await grads[e.name].data(), e.offset);
  tf.dispose([value, ...Object.values(variables), ...Object.values(grads)]);
  return { loss, grads: flat };
}

describe('transformer step against TensorFlow.js (CPU backend)', () => {
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
    const ref = await tfStep(layout, params, windows);

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
