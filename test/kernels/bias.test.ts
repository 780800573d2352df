import { describe, expect, it } from 'vitest';
import { biasAdd, biasGrad } from '../../kernels/ops/bias';
import { alignElements, createTensor, readTensor, submitCalls, tensorView, writeTensor } from '../../kernels/runtime';
import { expectClose, finiteDifferences } from '../support/compare';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { biasAddRef, biasGradRef, dot } from '../support/reference-dense';
import { mulberry32, randomArray } from '../support/rng';

const SHAPES = [
  { rows: 1, cols: 1 },
  { rows: 7, cols: 13 },
  { rows: 33, cols: 65 },
  { rows: 128, cols: 256 },
  { rows: 513, cols: 10 },
];

describe('biasAdd', () => {
  it('adds the bias to every row, out of place and in place', async () => {
    const gpu = await nodeGpu();
    let seed = 1;
    for (const { rows, cols } of SHAPES) {
      const rand = mulberry32(seed++);
      const xData = randomArray(rand, rows * cols);
      const biasData = randomArray(rand, cols);
      const ref = biasAddRef(xData, biasData, rows, cols);
      const x = createTensor(gpu, [rows, cols], 'x', xData);
      const bias = createTensor(gpu, [cols], 'bias', biasData);
      const out = createTensor(gpu, [rows, cols], 'out');
      await withValidation(gpu, async () => {
        submitCalls(gpu, [biasAdd(gpu, { x, bias, out }, { rows, cols }).call]);
        expectClose(await readTensor(gpu, out), ref, { atol: 1e-6, rtol: 1e-6, label: `out ${rows}x${cols}` });
        expectClose(await readTensor(gpu, x), xData, { atol: 0, rtol: 0, label: 'x untouched' });
        submitCalls(gpu, [biasAdd(gpu, { x, bias, out: x }, { rows, cols }).call]);
        expectClose(await readTensor(gpu, x), ref, { atol: 1e-6, rtol: 1e-6, label: `in place ${rows}x${cols}` });
      });
    }
  });

  it('update() to fewer rows touches only those rows', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(10);
    const [rows, cols] = [40, 9];
    const xData = randomArray(rand, rows * cols);
    const biasData = randomArray(rand, cols);
    const x = createTensor(gpu, [rows, cols], 'x', xData);
    const bias = createTensor(gpu, [cols], 'bias', biasData);
    const kernel = biasAdd(gpu, { x, bias, out: x }, { rows, cols });
    kernel.update({ rows: 3, cols });
    await withValidation(gpu, () => submitCalls(gpu, [kernel.call]));
    const ref = Float64Array.from(xData);
    ref.set(biasAddRef(xData, biasData, 3, cols));
    expectClose(await readTensor(gpu, x), ref, { atol: 1e-6, rtol: 1e-6, label: '3 of 40 rows' });
  });
});

describe('biasGrad', () => {
  it('sums dy over rows (matches the reference and finite differences of Σ G⊙(X + b))', async () => {
    const gpu = await nodeGpu();
    let seed = 20;
    for (const { rows, cols } of SHAPES) {
      const rand = mulberry32(seed++);
      const dyData = randomArray(rand, rows * cols);
      const dy = createTensor(gpu, [rows, cols], 'dy', dyData);
      const dbias = createTensor(gpu, [cols], 'dbias', randomArray(rand, cols));
      await withValidation(gpu, () => submitCalls(gpu, [biasGrad(gpu, { dy, dbias }, { rows, cols }).call]));
      const got = await readTensor(gpu, dbias);
      expectClose(got, biasGradRef(dyData, rows, cols), { atol: 1e-5, rtol: 1e-5, label: `dbias ${rows}x${cols}` });
      if (rows * cols < 5000) {
        const xData = randomArray(rand, rows * cols);
        const loss = (b: Float64Array): number => dot(dyData, biasAddRef(xData, b, rows, cols));
        const fd = finiteDifferences(loss, new Float64Array(cols));
        expectClose(got, fd, { atol: 1e-4, rtol: 1e-4, label: `dbias vs finite differences ${rows}x${cols}` });
      }
    }
  });

  it('accumulates into dbias, is bit-reproducible, and writes zeros for zero rows', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(30);
    const [rows, cols] = [300, 70];
    const dyData = randomArray(rand, rows * cols);
    const prev = randomArray(rand, cols);
    const dy = createTensor(gpu, [rows, cols], 'dy', dyData);
    const dbias = createTensor(gpu, [cols], 'dbias', prev);
    await withValidation(gpu, async () => {
      const acc = biasGrad(gpu, { dy, dbias }, { rows, cols }, { accumulate: true });
      submitCalls(gpu, [acc.call]);
      const ref = biasGradRef(dyData, rows, cols).map((v, c) => v + prev[c]);
      expectClose(await readTensor(gpu, dbias), ref, { atol: 1e-5, rtol: 1e-5, label: 'accumulated' });

      const plain = biasGrad(gpu, { dy, dbias }, { rows, cols });
      submitCalls(gpu, [plain.call]);
      const first = Array.from(await readTensor(gpu, dbias));
      submitCalls(gpu, [plain.call]);
      expect(Array.from(await readTensor(gpu, dbias))).toEqual(first);

      plain.update({ rows: 0, cols });
      submitCalls(gpu, [plain.call]);
      expect(Array.from(await readTensor(gpu, dbias))).toEqual(new Array(cols).fill(0));
    });
  });

  it('update() to fewer rows sums only those rows; dy and dbias may share one flat buffer', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(40);
    const [rows, cols] = [64, 11];
    const flat = createTensor(gpu, [alignElements(rows * cols) + cols], 'flat');
    const dy = tensorView(flat, 0, [rows, cols], 'dy');
    const dbias = tensorView(flat, alignElements(rows * cols), [cols], 'dbias');
    const dyData = randomArray(rand, rows * cols);
    writeTensor(gpu, dy, dyData);
    const kernel = biasGrad(gpu, { dy, dbias }, { rows, cols });
    kernel.update({ rows: 5, cols });
    await withValidation(gpu, () => submitCalls(gpu, [kernel.call]));
    expectClose(await readTensor(gpu, dbias), biasGradRef(dyData, 5, cols), {
      atol: 1e-6,
      rtol: 1e-5,
      label: '5 of 64 rows',
    });
  });

  it('rejects tensors too small for the dims', async () => {
    const gpu = await nodeGpu();
    const dy = createTensor(gpu, [4, 5], 'dy');
    expect(() => biasGrad(gpu, { dy, dbias: createTensor(gpu, [4], 'dbias') }, { rows: 4, cols: 5 })).toThrow(/dbias/);
    expect(() => biasAdd(gpu, { x: dy, bias: createTensor(gpu, [5], 'b'), out: dy }, { rows: 5, cols: 5 })).toThrow(
      /needs/,
    );
  });
});
