/**
 * The transformer written in TensorFlow.js ops from the definitions (GPT-2's block), as an independent
 * reference for our kernels' step: the summed loss (each window's mean next-token cross-entropy) and
 * its gradients by tf.variableGrads. The caller picks the backend (CPU in the tests).
 */
import * as tf from '@tensorflow/tfjs';
import type { ParamLayout, TransformerSpec } from '../../core/training/model-spec';

/** The model in TF.js ops, from the definitions (GPT-2's block), returning the summed loss. */
export function tfLoss(
  spec: TransformerSpec,
  v: Record<string, tf.Variable>,
  windows: Uint32Array,
  batch: number,
): tf.Scalar {
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

/** Loss and flat gradients of one batch through the TF.js model, at `params` (flat, in `layout`). */
export async function tfTransformerStep(
  spec: TransformerSpec,
  layout: ParamLayout,
  params: Float32Array,
  windows: Uint32Array,
  batch: number,
) {
  const variables: Record<string, tf.Variable> = {};
  for (const e of layout.entries) {
    variables[e.name] = tf.variable(tf.tensor(params.subarray(e.offset, e.offset + e.size), e.shape), true, e.name);
  }
  const { value, grads } = tf.variableGrads(() => tfLoss(spec, variables, windows, batch));
  const loss = (await value.data())[0];
  const flat = new Float64Array(layout.totalElements);
  for (const e of layout.entries) flat.set(await grads[e.name].data(), e.offset);
  tf.dispose([value, ...Object.values(variables), ...Object.values(grads)]);
  return { loss, grads: flat };
}
