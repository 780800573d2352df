import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashBytes, hashParams } from '../../core/state/hash';
import {
  CNN_SPEC,
  MLP_SPEC,
  parameterLayout,
  type ModelSpec,
  type SequentialSpec,
} from '../../core/training/model-spec';
import { initParams } from '../../kernels/model/layers';
import { createModel, type Model, type ModelOptions } from '../../kernels/model/model';
import type { Gpu } from '../../kernels/runtime';
import { nodeGpu, withValidation, skipWithoutNodeGpu } from '../support/node-gpu';
import {
  expectScalarClose,
  expectTensorsClose,
  referenceAdamW,
  referenceForwardBackward,
  referenceSgdMomentum,
} from '../support/reference-model';
import { finiteDifferences } from '../support/compare';
import { mulberry32, randomArray } from '../support/rng';

/** The small conv net: conv 4 filters 3×3 + ReLU, 2×2 max-pool, dense to the classes. */
const SMALL_CNN_SPEC: ModelSpec = {
  name: 'small-cnn',
  input: [28, 28, 1],
  classes: 10,
  layers: [
    { type: 'conv2d', filters: 4, kernel: 3, padding: 'same', activation: 'relu' },
    { type: 'maxpool2' },
    { type: 'dense', units: 10, activation: 'none' },
  ],
};

const ADAMW = { kind: 'adamw', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 } as const;
const SGD = { kind: 'sgd', lr: 0.05, momentum: 0.9, weightDecay: 1e-4 } as const;

function seededBatch(spec: SequentialSpec, batch: number, seed: number): { x: Float32Array; labels: Uint32Array } {
  const rand = mulberry32(seed);
  const [h, w, c] = spec.input;
  const x = randomArray(rand, batch * h * w * c, 0, 1);
  const labels = Uint32Array.from({ length: batch }, () => Math.floor(rand() * spec.classes));
  return { x, labels };
}

describe('initialisation', () => {
  it('initialises deterministically: same seed same bytes, biases and padding zero, weights within the He/Glorot limits', () => {
    const layout = parameterLayout(CNN_SPEC);
    const a = initParams(CNN_SPEC, layout, 42);
    const b = initParams(CNN_SPEC, layout, 42);
    const c = initParams(CNN_SPEC, layout, 43);
    expect(hashParams(a)).toBe(hashParams(b));
    expect(hashParams(a)).not.toBe(hashParams(c));
    // A fixed vector: a browser tab and Node must produce these bytes for the same seed (plain SHA-256
    // of the bytes, `hashBytes`, not the tree state hash; the same bytes the 64-bit hash pinned as
    // b64180366e983c9e before it was replaced).
    expect(hashBytes(initParams(MLP_SPEC, parameterLayout(MLP_SPEC), 1))).toBe(
      'ba0b9a215af69d38e323dc192346356ba97fe878909dcfb2bd7de2f6a7a197e3',
    );
    const covered = new Uint8Array(layout.totalElements);
    for (const e of layout.entries) {
      covered.fill(1, e.offset, e.offset + e.size);
      const values = a.subarray(e.offset, e.offset + e.size);
      if (e.kind === 'bias') {
        expect(
          values.every((v) => v === 0),
          e.name,
        ).toBe(true);
        continue;
      }
      const layer = CNN_SPEC.layers[e.layer];
      const receptive = e.shape.length === 4 ? e.shape[0] * e.shape[1] : 1;
      const fanIn = receptive * e.shape[e.shape.length - 2];
      const fanOut = receptive * e.shape[e.shape.length - 1];
      const limit =
        layer.type !== 'maxpool2' && layer.activation === 'relu'
          ? Math.sqrt(6 / fanIn)
          : Math.sqrt(6 / (fanIn + fanOut));
      const max = values.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
      expect(max, e.name).toBeLessThanOrEqual(limit);
      expect(max, e.name).toBeGreaterThan(0.9 * limit);
      // Uniform on ±limit has variance limit²/3.
      const variance = values.reduce((s, v) => s + v * v, 0) / values.length;
      expect(variance / ((limit * limit) / 3), e.name).toBeGreaterThan(0.8);
      expect(variance / ((limit * limit) / 3), e.name).toBeLessThan(1.2);
    }
    a.forEach((v, i) => {
      if (!covered[i] && v !== 0) throw new Error(`padding element ${i} is ${v}`);
    });
  });

  it('rejects a layout that does not fit the spec', () => {
    const layout = parameterLayout(MLP_SPEC);
    const wrong = { ...layout, entries: layout.entries.map((e, i) => (i === 0 ? { ...e, shape: [10, 256] } : e)) };
    expect(() => initParams(MLP_SPEC, wrong, 1)).toThrow(/layers\.0\.weight has shape \[10,256\]/);
  });
});

describe('float64 reference model', () => {
  it('has gradients equal to central finite differences of its loss (conv, pool, dense, ReLU)', () => {
    const spec: ModelSpec = {
      name: 'fd',
      input: [5, 4, 2],
      classes: 3,
      layers: [
        { type: 'conv2d', filters: 3, kernel: 3, padding: 'same', activation: 'relu' },
        { type: 'maxpool2' },
        { type: 'conv2d', filters: 2, kernel: 1, padding: 'valid', activation: 'none' },
        { type: 'dense', units: 4, activation: 'relu' },
        { type: 'dense', units: 3, activation: 'none' },
      ],
    };
    const layout = parameterLayout(spec);
    const params = Float64Array.from(initParams(spec, layout, 5));
    const rand = mulberry32(9);
    for (const e of layout.entries)
      if (e.kind === 'bias') for (let i = 0; i < e.size; i++) params[e.offset + i] = 0.1 * (rand() - 0.5);
    const { x, labels } = seededBatch(spec, 3, 4);
    const ref = referenceForwardBackward(spec, layout, params, x, labels, 3);
    const indices = layout.entries.flatMap((e) => [...Array(e.size).keys()].map((i) => e.offset + i));
    const fd = finiteDifferences((p) => referenceForwardBackward(spec, layout, p, x, labels, 3).lossSum, params, {
      eps: 1e-6,
      indices,
    });
    for (const i of indices)
      expect(Math.abs(ref.grads[i] - fd[i]), `param ${i}`).toBeLessThan(1e-6 + 1e-5 * Math.abs(fd[i]));
  });
});

// The device is taken in beforeAll, which runs before the per-test skip: skip the suite here.
describe.skipIf(await skipWithoutNodeGpu())('GPU model against the float64 reference', () => {
  let gpu: Gpu;
  const models: Model[] = [];
  const make = (
    spec: ModelSpec,
    options: Omit<ModelOptions, 'optimizer'> & { optimizer?: ModelOptions['optimizer'] },
  ) => {
    const model = createModel(gpu, spec, parameterLayout(spec), { optimizer: ADAMW, ...options });
    models.push(model);
    return model;
  };
  beforeAll(async () => {
    gpu = await nodeGpu();
  });
  afterAll(() =>
    models.forEach((m) => {
      m.destroy();
    }),
  );

  it('a backward pass defines the whole grads buffer: garbage a writeGradients left in the padding is gone', async () => {
    const layout = parameterLayout(SMALL_CNN_SPEC);
    const covered = new Uint8Array(layout.totalElements);
    for (const e of layout.entries) covered.fill(1, e.offset, e.offset + e.size);
    expect(covered.includes(0), 'the layout has padding between tensors').toBe(true);
    const model = make(SMALL_CNN_SPEC, { maxBatch: 2 });
    model.writeGradients(new Float32Array(layout.totalElements).fill(12345));
    const { x, labels } = seededBatch(SMALL_CNN_SPEC as SequentialSpec, 2, 5);
    model.forwardBackward(x, labels, 2);
    const grads = await model.readGradients();
    for (let i = 0; i < grads.length; i++) if (!covered[i]) expect(grads[i], `padding element ${i}`).toBe(0);
  });

  it.each([
    ['mlp', MLP_SPEC, 32],
    ['small conv net', SMALL_CNN_SPEC, 16],
  ] as const)(
    '%s: one AdamW training step matches in loss, every gradient and the updated parameters',
    async (_, spec, batch) => {
      const layout = parameterLayout(spec);
      const model = make(spec, { maxBatch: batch, seed: 3 });
      const params0 = await model.readParams();
      const { x, labels } = seededBatch(spec, batch, 17);
      await withValidation(gpu, () => model.trainStep(x, labels));
      const [lossSum, grads, params1] = [
        await model.readLossSum(),
        await model.readGradients(),
        await model.readParams(),
      ];
      expect(model.optimizerStep).toBe(1);

      const ref = referenceForwardBackward(spec, layout, params0, x, labels, batch);
      expectScalarClose(lossSum, ref.lossSum, 1e-4, 'loss sum');
      expectTensorsClose(grads, ref.grads, layout, { label: 'gradients' });
      // The optimizer is checked on the GPU's own gradients (already checked above): AdamW's first step
      // is ≈ lr·sign(g), so the reference's gradients would flip updates wherever g is float32 noise.
      const zeros = new Float64Array(layout.totalElements);
      const refStep = referenceAdamW(params0, grads, zeros, zeros, { ...ADAMW, gradScale: 1 / batch, t: 1 });
      expectTensorsClose(params1, refStep.params, layout, { label: 'params after AdamW' });
      const padding = params1.filter((_, i) => !layout.entries.some((e) => i >= e.offset && i < e.offset + e.size));
      expect(padding.every((v) => v === 0)).toBe(true);
    },
  );

  it('cnn (two conv blocks, 5×5 kernels): forward and backward match at a small batch', async () => {
    const layout = parameterLayout(CNN_SPEC);
    const model = make(CNN_SPEC, { maxBatch: 3, seed: 8 });
    const params = await model.readParams();
    const { x, labels } = seededBatch(CNN_SPEC, 3, 5);
    await withValidation(gpu, () => model.forwardBackward(x, labels));
    const ref = referenceForwardBackward(CNN_SPEC, layout, params, x, labels, 3);
    expectScalarClose(await model.readLossSum(), ref.lossSum, 1e-4, 'loss sum');
    expectTensorsClose(await model.readGradients(), ref.grads, layout, { label: 'gradients' });
  });

  it('resizes to a smaller (odd) batch and back without re-creating anything', async () => {
    const layout = parameterLayout(MLP_SPEC);
    const model = make(MLP_SPEC, { maxBatch: 48, seed: 4 });
    const params = await model.readParams();
    for (const batch of [48, 17, 1, 48]) {
      const { x, labels } = seededBatch(MLP_SPEC, batch, 100 + batch);
      model.forwardBackward(x, labels);
      expect(model.batch).toBe(batch);
      const ref = referenceForwardBackward(MLP_SPEC, layout, params, x, labels, batch);
      expectScalarClose(await model.readLossSum(), ref.lossSum, 1e-4, `loss sum at batch ${batch}`);
      expectTensorsClose(await model.readGradients(), ref.grads, layout, { label: `gradients at batch ${batch}` });
    }
    const { x, labels } = seededBatch(MLP_SPEC, 49, 1);
    expect(() => model.forwardBackward(x, labels)).toThrow(/batch 49 outside 1\.\.48/);
  });

  it('sums gradients over samples: two half batches add up to the full batch', async () => {
    const model = make(SMALL_CNN_SPEC, { maxBatch: 24, seed: 6 });
    const { x, labels } = seededBatch(SMALL_CNN_SPEC, 24, 23);
    const half = 12 * 28 * 28;
    model.forwardBackward(x, labels);
    const [fullLoss, full] = [await model.readLossSum(), await model.readGradients()];
    model.forwardBackward(x.subarray(0, half), labels.subarray(0, 12));
    const [loss1, first] = [await model.readLossSum(), await model.readGradients()];
    model.forwardBackward(x.subarray(half), labels.subarray(12));
    const [loss2, second] = [await model.readLossSum(), await model.readGradients()];
    expectScalarClose(loss1 + loss2, fullLoss, 1e-5, 'loss of the halves');
    const sum = first.map((g, i) => g + second[i]);
    expectTensorsClose(sum, full, parameterLayout(SMALL_CNN_SPEC), { rtol: 1e-5, label: 'half-batch gradient sum' });
    // A mean would make the halves add up to twice the full batch's gradient; make sure it is not that.
    const layout = parameterLayout(SMALL_CNN_SPEC);
    const w = layout.entries[0];
    const norm = (a: Float32Array) => Math.hypot(...a.subarray(w.offset, w.offset + w.size));
    expect(norm(full)).toBeGreaterThan(1.5 * norm(first));
  });

  it('applies written gradients (the allreduce path) exactly like its own', async () => {
    const spec = MLP_SPEC;
    const a = make(spec, { maxBatch: 20, seed: 2 });
    const b = make(spec, { maxBatch: 20, seed: 2 });
    const { x, labels } = seededBatch(spec, 20, 31);
    a.trainStep(x, labels);
    b.forwardBackward(x, labels);
    const grads = await b.readGradients();
    b.writeGradients(grads);
    b.applyOptimizer(20);
    expect(hashParams(await b.readParams())).toBe(hashParams(await a.readParams()));
    expect(() => b.writeGradients(new Float32Array(3))).toThrow(/3 floats/);
  });

  it('takes an SGD-with-momentum step like torch.optim.SGD', async () => {
    const layout = parameterLayout(SMALL_CNN_SPEC);
    const model = make(SMALL_CNN_SPEC, { maxBatch: 8, seed: 12, optimizer: SGD });
    expect(model.momentNames).toEqual(['velocity']);
    const { x, labels } = seededBatch(SMALL_CNN_SPEC, 8, 2);
    const params0 = await model.readParams();
    model.trainStep(x, labels);
    const grads1 = await model.readGradients();
    const params1 = await model.readParams();
    const step1 = referenceSgdMomentum(params0, grads1, new Float64Array(layout.totalElements), {
      ...SGD,
      gradScale: 1 / 8,
    });
    expectTensorsClose(params1, step1.params, layout, { rtol: 1e-5, label: 'params after SGD step 1' });
    model.trainStep(x, labels);
    const step2 = referenceSgdMomentum(params1, await model.readGradients(), step1.velocity, {
      ...SGD,
      gradScale: 1 / 8,
    });
    expectTensorsClose(await model.readParams(), step2.params, layout, {
      rtol: 1e-5,
      label: 'params after SGD step 2 (momentum)',
    });
  });

  it('evaluates loss and accuracy over more samples than maxBatch, in chunks', async () => {
    const layout = parameterLayout(MLP_SPEC);
    const model = make(MLP_SPEC, { maxBatch: 16, seed: 10 });
    const params = await model.readParams();
    const { x, labels } = seededBatch(MLP_SPEC, 40, 77);
    model.forwardBackward(x.subarray(0, 16 * 784), labels.subarray(0, 16));
    const gradsBefore = hashParams(await model.readGradients());
    const result = await model.evaluate(x, labels);
    const ref = referenceForwardBackward(MLP_SPEC, layout, params, x, labels, 40);
    expect(result.count).toBe(40);
    expect(result.correct).toBe(ref.correct);
    expectScalarClose(result.lossSum, ref.lossSum, 1e-4, 'evaluation loss');
    expect(hashParams(await model.readGradients())).toBe(gradsBefore);
  });

  it('learns: the loss on a fixed batch falls over a few AdamW steps', async () => {
    const model = make(MLP_SPEC, { maxBatch: 32, seed: 1, optimizer: { ...ADAMW, lr: 1e-3 } });
    const { x, labels } = seededBatch(MLP_SPEC, 32, 3);
    const losses: number[] = [];
    for (let i = 0; i < 12; i++) {
      model.trainStep(x, labels);
      losses.push(await model.readLossSum());
    }
    expect(losses[losses.length - 1]).toBeLessThan(0.5 * losses[0]);
  });
});
