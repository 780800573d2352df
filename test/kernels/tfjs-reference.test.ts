/**
 * One full `mlp` training step on our kernels against an independent implementation: TensorFlow.js
 * (CPU backend, float32) with the same weights and batch, gradients by tf.variableGrads. Loss and
 * every gradient must agree within 1e-4 relative (norm-wise per tensor, and element-wise against
 * |ref| + the tensor's RMS: see expectTensorsClose).
 */
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { MLP_SPEC, parameterLayout } from '../../core/training/model-spec';
import { createModel } from '../../kernels/model/model';
import type { Gpu } from '../../kernels/runtime';
import { nodeGpu, skipWithoutNodeGpu } from '../support/node-gpu';
import { expectScalarClose, expectTensorsClose } from '../support/reference-model';
import { mulberry32, randomArray } from '../support/rng';

const BATCH = 64;

// The device is taken in beforeAll, which runs before the per-test skip: skip the suite here.
describe.skipIf(await skipWithoutNodeGpu())('mlp step against TensorFlow.js (CPU backend)', () => {
  let gpu: Gpu;
  beforeAll(async () => {
    gpu = await nodeGpu();
    await tf.setBackend('cpu');
    await tf.ready();
  });

  it('agrees on the summed loss and every gradient within 1e-4 relative', async () => {
    const layout = parameterLayout(MLP_SPEC);
    const model = createModel(gpu, MLP_SPEC, layout, {
      maxBatch: BATCH,
      seed: 21,
      optimizer: { kind: 'adamw', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 },
    });
    const rand = mulberry32(2024);
    const x = randomArray(rand, BATCH * 784, 0, 1);
    const labels = Uint32Array.from({ length: BATCH }, () => Math.floor(rand() * 10));
    const params = await model.readParams();

    model.trainStep(x, labels);
    const [lossSum, grads] = [await model.readLossSum(), await model.readGradients()];
    model.destroy();

    const variables = layout.entries.map((e) =>
      tf.variable(tf.tensor(params.subarray(e.offset, e.offset + e.size), e.shape), true, e.name),
    );
    const input = tf.tensor2d(x, [BATCH, 784]);
    const onehot = tf.oneHot(tf.tensor1d(Array.from(labels), 'int32'), 10);
    const { value, grads: tfGrads } = tf.variableGrads(() => {
      let h: tf.Tensor2D = input;
      MLP_SPEC.layers.forEach((layer, i) => {
        if (layer.type !== 'dense') throw new Error('mlp has dense layers only');
        const [w, b] = [variables[2 * i], variables[2 * i + 1]];
        const z = tf.add(tf.matMul(h, w as tf.Tensor2D), b) as tf.Tensor2D;
        h = layer.activation === 'relu' ? tf.relu(z) : z;
      });
      return tf.neg(tf.sum(tf.mul(onehot, tf.logSoftmax(h)))) as tf.Scalar;
    });
    const tfLoss = (await value.data())[0];
    const tfFlat = new Float64Array(layout.totalElements);
    for (const e of layout.entries) tfFlat.set(await tfGrads[e.name].data(), e.offset);
    tf.dispose([value, input, onehot, ...variables, ...Object.values(tfGrads)]);

    expectScalarClose(lossSum, tfLoss, 1e-4, 'loss sum vs TF.js');
    expectTensorsClose(grads, tfFlat, layout, { rtol: 1e-4, label: 'gradients vs TF.js' });
    expect(Number.isFinite(tfLoss) && tfLoss > 0).toBe(true);
  });
});
