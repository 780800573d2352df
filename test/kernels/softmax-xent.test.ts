import { describe, expect, it } from 'vitest';
import { createTensor, readBuffer, readTensor, submitCalls, type Gpu } from '../../kernels/runtime';
import { softmaxCrossEntropy } from '../../kernels/ops/softmax-xent';
import { expectClose, finiteDifferences } from '../support/compare';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { softmaxCrossEntropyGradRef, softmaxCrossEntropyLossRef } from '../support/reference-dense';
import { mulberry32, randomArray, randomInt } from '../support/rng';

function randomLabels(rand: () => number, rows: number, classes: number): Uint32Array {
  return Uint32Array.from({ length: rows }, () => randomInt(rand, 0, classes - 1));
}

async function runSoftmaxXent(
  gpu: Gpu,
  logitsData: Float32Array,
  labelsData: Uint32Array,
  rows: number,
  classes: number,
) {
  const logits = createTensor(gpu, [rows, classes], 'logits', logitsData);
  const labels = createTensor(gpu, [rows], 'labels', labelsData);
  const loss = createTensor(gpu, [1], 'loss', new Float32Array([123]));
  const dlogits = createTensor(gpu, [rows, classes], 'dlogits');
  const kernel = await withValidation(gpu, () => {
    const k = softmaxCrossEntropy(gpu, { logits, labels, loss, dlogits }, { rows, classes });
    submitCalls(gpu, [k.call]);
    return k;
  });
  return { kernel, loss, dlogits, logits, labels };
}

describe('softmaxCrossEntropy', () => {
  it('matches the float64 loss (a sum over rows) and softmax − onehot for odd shapes', async () => {
    const gpu = await nodeGpu();
    let seed = 1;
    for (const [rows, classes] of [
      [1, 1],
      [1, 10],
      [7, 3],
      [65, 10],
      [513, 10],
      [33, 129],
    ]) {
      const rand = mulberry32(seed++);
      const logitsData = randomArray(rand, rows * classes, -4, 4);
      const labelsData = randomLabels(rand, rows, classes);
      const { loss, dlogits } = await runSoftmaxXent(gpu, logitsData, labelsData, rows, classes);
      const refLoss = softmaxCrossEntropyLossRef(logitsData, labelsData, rows, classes);
      expectClose(await readTensor(gpu, loss), [refLoss], {
        atol: 1e-5 * rows,
        rtol: 1e-5,
        label: `loss ${rows}x${classes}`,
      });
      expectClose(await readTensor(gpu, dlogits), softmaxCrossEntropyGradRef(logitsData, labelsData, rows, classes), {
        atol: 1e-6,
        rtol: 1e-5,
        label: `dlogits ${rows}x${classes}`,
      });
    }
  });

  it('gives dlogits equal to finite differences of the summed float64 loss', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(10);
    const [rows, classes] = [9, 10];
    const logitsData = randomArray(rand, rows * classes, -3, 3);
    const labelsData = randomLabels(rand, rows, classes);
    const { dlogits } = await runSoftmaxXent(gpu, logitsData, labelsData, rows, classes);
    const fd = finiteDifferences((z) => softmaxCrossEntropyLossRef(z, labelsData, rows, classes), logitsData, {
      eps: 1e-4,
    });
    expectClose(await readTensor(gpu, dlogits), fd, { atol: 1e-5, rtol: 1e-4, label: 'dlogits vs finite differences' });
  });

  it('stays finite and accurate for huge logits (max-subtraction)', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(20);
    const [rows, classes] = [16, 10];
    const logitsData = randomArray(rand, rows * classes, -1, 1).map((v, i) => (i % 3 === 0 ? v * 1e4 + 8e4 : v * 50));
    const labelsData = randomLabels(rand, rows, classes);
    const { loss, dlogits } = await runSoftmaxXent(gpu, logitsData, labelsData, rows, classes);
    const refLoss = softmaxCrossEntropyLossRef(logitsData, labelsData, rows, classes);
    // Logits near 8e4 carry float32 rounding of ~4e-3 each; the loss inherits it.
    expectClose(await readTensor(gpu, loss), [refLoss], { atol: 0.1, rtol: 1e-5, label: 'huge-logit loss' });
    expectClose(await readTensor(gpu, dlogits), softmaxCrossEntropyGradRef(logitsData, labelsData, rows, classes), {
      atol: 1e-5,
      rtol: 1e-4,
      label: 'huge-logit dlogits',
    });
  });

  it('is bit-reproducible, honours update() to fewer rows, and writes 0 for zero rows', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(30);
    const [rows, classes] = [300, 10];
    const logitsData = randomArray(rand, rows * classes, -4, 4);
    const labelsData = randomLabels(rand, rows, classes);
    const { kernel, loss, dlogits } = await runSoftmaxXent(gpu, logitsData, labelsData, rows, classes);
    const firstLoss = new Uint32Array(await readBuffer(gpu, loss.buffer, 4))[0];
    for (let i = 0; i < 3; i++) {
      submitCalls(gpu, [kernel.call]);
      expect(new Uint32Array(await readBuffer(gpu, loss.buffer, 4))[0]).toBe(firstLoss);
    }

    const before = await readTensor(gpu, dlogits);
    kernel.update({ rows: 37, classes });
    submitCalls(gpu, [kernel.call]);
    expectClose(await readTensor(gpu, loss), [softmaxCrossEntropyLossRef(logitsData, labelsData, 37, classes)], {
      atol: 1e-4,
      rtol: 1e-5,
      label: '37-row loss',
    });
    const after = await readTensor(gpu, dlogits);
    expect(Array.from(after.subarray(37 * classes))).toEqual(Array.from(before.subarray(37 * classes)));

    kernel.update({ rows: 0, classes });
    submitCalls(gpu, [kernel.call]);
    expect(Array.from(await readTensor(gpu, loss))).toEqual([0]);
  });

  it('scales the loss and dlogits by the given scale (a language model: mean over positions), 256 classes', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(40);
    const [rows, classes, scale] = [3 * 37, 256, 1 / 37];
    const logitsData = randomArray(rand, rows * classes, -4, 4);
    const labelsData = randomLabels(rand, rows, classes);
    const logits = createTensor(gpu, [rows, classes], 'logits', logitsData);
    const labels = createTensor(gpu, [rows], 'labels', labelsData);
    const loss = createTensor(gpu, [1], 'loss');
    const dlogits = createTensor(gpu, [rows, classes], 'dlogits');
    await withValidation(gpu, () =>
      submitCalls(gpu, [softmaxCrossEntropy(gpu, { logits, labels, loss, dlogits }, { rows, classes, scale }).call]),
    );
    const refLoss = softmaxCrossEntropyLossRef(logitsData, labelsData, rows, classes) * scale;
    expectClose(await readTensor(gpu, loss), [refLoss], { atol: 1e-5, rtol: 1e-5, label: 'scaled loss' });
    const refGrad = softmaxCrossEntropyGradRef(logitsData, labelsData, rows, classes).map((v) => v * scale);
    expectClose(await readTensor(gpu, dlogits), refGrad, { atol: 1e-7, rtol: 1e-5, label: 'scaled dlogits' });
    expect(() => softmaxCrossEntropy(gpu, { logits, labels, loss, dlogits }, { rows, classes, scale: 0 })).toThrow(
      /scale/,
    );
  });

  it('makes the loss NaN when a label is out of range', async () => {
    const gpu = await nodeGpu();
    const { loss } = await runSoftmaxXent(gpu, new Float32Array([0.5, -1, 2, 0, 1, 3]), new Uint32Array([1, 3]), 2, 3);
    expect(Number.isNaN((await readTensor(gpu, loss))[0])).toBe(true);
  });

  it('rejects tensors too small for the dims', async () => {
    const gpu = await nodeGpu();
    const t = (n: number) => createTensor(gpu, [n], 't');
    expect(() =>
      softmaxCrossEntropy(gpu, { logits: t(20), labels: t(2), loss: t(1), dlogits: t(20) }, { rows: 3, classes: 10 }),
    ).toThrow(/needs/);
    expect(() =>
      softmaxCrossEntropy(gpu, { logits: t(30), labels: t(3), loss: t(1), dlogits: t(20) }, { rows: 3, classes: 10 }),
    ).toThrow(/dlogits|smaller/);
  });
});
