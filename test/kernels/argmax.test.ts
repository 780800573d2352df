import { describe, expect, it } from 'vitest';
import { countCorrect } from '../../kernels/ops/argmax';
import { createTensor, readBuffer, submitCalls } from '../../kernels/runtime';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { countCorrectRef } from '../support/reference-dense';
import { mulberry32, randomArray, randomInt } from '../support/rng';

describe('countCorrect', () => {
  it('counts rows whose argmax equals the label, on seeded random shapes', async () => {
    const gpu = await nodeGpu();
    let seed = 1;
    for (const [rows, classes] of [
      [1, 1],
      [1, 10],
      [7, 3],
      [64, 10],
      [65, 10],
      [1000, 10],
      [33, 129],
    ]) {
      const rand = mulberry32(seed++);
      const logitsData = randomArray(rand, rows * classes);
      // About half the labels right, so both outcomes are exercised.
      const labelsData = Uint32Array.from({ length: rows }, (_, r) =>
        rand() < 0.5 ? randomInt(rand, 0, classes - 1) : argmax(logitsData, r, classes),
      );
      const logits = createTensor(gpu, [rows, classes], 'logits', logitsData);
      const labels = createTensor(gpu, [rows], 'labels', labelsData);
      const correct = createTensor(gpu, [1], 'correct', new Uint32Array([999]));
      await withValidation(gpu, () =>
        submitCalls(gpu, [countCorrect(gpu, { logits, labels, correct }, { rows, classes }).call]),
      );
      const got = new Uint32Array(await readBuffer(gpu, correct.buffer, 4))[0];
      expect(got, `${rows}x${classes}`).toBe(countCorrectRef(logitsData, labelsData, rows, classes));
    }
  });

  it('breaks ties toward the lowest index', async () => {
    const gpu = await nodeGpu();
    // Row maxima tied at indices (1, 3), (0, 2), (2, 3); labels name the lower index in rows 0 and 2.
    const logitsData = new Float32Array([0, 5, 1, 5, 7, 2, 7, 7, -1, -3, 4, 4]);
    const labelsData = new Uint32Array([1, 2, 2]);
    const logits = createTensor(gpu, [3, 4], 'logits', logitsData);
    const labels = createTensor(gpu, [3], 'labels', labelsData);
    const correct = createTensor(gpu, [1], 'correct');
    await withValidation(gpu, () =>
      submitCalls(gpu, [countCorrect(gpu, { logits, labels, correct }, { rows: 3, classes: 4 }).call]),
    );
    expect(new Uint32Array(await readBuffer(gpu, correct.buffer, 4))[0]).toBe(2);
    expect(countCorrectRef(logitsData, labelsData, 3, 4)).toBe(2);
  });

  it('update() counts only the first rows, and zero rows give 0', async () => {
    const gpu = await nodeGpu();
    const rows = 200;
    const classes = 10;
    const rand = mulberry32(7);
    const logitsData = randomArray(rand, rows * classes);
    const labelsData = Uint32Array.from({ length: rows }, (_, r) => argmax(logitsData, r, classes));
    const logits = createTensor(gpu, [rows, classes], 'logits', logitsData);
    const labels = createTensor(gpu, [rows], 'labels', labelsData);
    const correct = createTensor(gpu, [1], 'correct');
    const kernel = countCorrect(gpu, { logits, labels, correct }, { rows, classes });
    await withValidation(gpu, async () => {
      kernel.update({ rows: 77, classes });
      submitCalls(gpu, [kernel.call]);
      expect(new Uint32Array(await readBuffer(gpu, correct.buffer, 4))[0]).toBe(77);
      kernel.update({ rows: 0, classes });
      submitCalls(gpu, [kernel.call]);
      expect(new Uint32Array(await readBuffer(gpu, correct.buffer, 4))[0]).toBe(0);
    });
  });
});

function argmax(x: ArrayLike<number>, row: number, classes: number): number {
  let best = 0;
  for (let j = 1; j < classes; j++) if (x[row * classes + j] > x[row * classes + best]) best = j;
  return best;
}
