import { describe, expect, it } from 'vitest';
import { reluBackward, reluForward } from '../../kernels/ops/relu';
import { alignElements, createTensor, readTensor, submitCalls, tensorView, writeTensor } from '../../kernels/runtime';
import { expectClose, finiteDifferences } from '../support/compare';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { dot, reluBackwardRef, reluRef } from '../support/reference-dense';
import { mulberry32, randomArray } from '../support/rng';

const SIZES = [1, 7, 255, 256, 257, 33 * 65, 100_003];

describe('reluForward', () => {
  it('clamps negatives to zero, out of place and in place, for odd sizes', async () => {
    const gpu = await nodeGpu();
    let seed = 1;
    for (const size of SIZES) {
      const data = randomArray(mulberry32(seed++), size);
      data[0] = 0; // the boundary value stays 0
      const x = createTensor(gpu, [size], 'x', data);
      const out = createTensor(gpu, [size], 'out');
      await withValidation(gpu, async () => {
        submitCalls(gpu, [reluForward(gpu, { x, out }, { size }).call]);
        expectClose(await readTensor(gpu, out), reluRef(data), { atol: 0, rtol: 0, label: `relu ${size}` });
        submitCalls(gpu, [reluForward(gpu, { x, out: x }, { size }).call]);
        expectClose(await readTensor(gpu, x), reluRef(data), { atol: 0, rtol: 0, label: `relu in place ${size}` });
      });
    }
  });

  it('update() to a smaller size leaves the tail untouched', async () => {
    const gpu = await nodeGpu();
    const data = randomArray(mulberry32(10), 1000);
    const x = createTensor(gpu, [1000], 'x', data);
    const kernel = reluForward(gpu, { x, out: x }, { size: 1000 });
    kernel.update({ size: 300 });
    await withValidation(gpu, () => submitCalls(gpu, [kernel.call]));
    const ref = Float64Array.from(data, (v, i) => (i < 300 ? Math.max(v, 0) : v));
    expectClose(await readTensor(gpu, x), ref, { atol: 0, rtol: 0, label: 'first 300' });
  });
});

describe('reluBackward', () => {
  it('passes dy where the output is positive (reference and finite differences of Σ G⊙relu(X))', async () => {
    const gpu = await nodeGpu();
    let seed = 20;
    for (const size of SIZES) {
      const rand = mulberry32(seed++);
      // Keep inputs away from the kink so central differences are exact there.
      const xData = randomArray(rand, size).map((v) => (Math.abs(v) < 0.01 ? v + 0.02 : v));
      const yData = Float32Array.from(reluRef(xData));
      const gData = randomArray(rand, size);
      const y = createTensor(gpu, [size], 'y', yData);
      const dy = createTensor(gpu, [size], 'dy', gData);
      const dx = createTensor(gpu, [size], 'dx');
      await withValidation(gpu, async () => {
        submitCalls(gpu, [reluBackward(gpu, { y, dy, dx }, { size }).call]);
        const got = await readTensor(gpu, dx);
        expectClose(got, reluBackwardRef(yData, gData), { atol: 0, rtol: 0, label: `drelu ${size}` });
        if (size <= 257) {
          const fd = finiteDifferences((xs) => dot(gData, reluRef(xs)), xData, { eps: 1e-3 });
          expectClose(got, fd, { atol: 1e-5, rtol: 1e-4, label: `drelu vs finite differences ${size}` });
        }
        submitCalls(gpu, [reluBackward(gpu, { y, dy, dx: dy }, { size }).call]);
        expectClose(await readTensor(gpu, dy), reluBackwardRef(yData, gData), {
          atol: 0,
          rtol: 0,
          label: `drelu in place ${size}`,
        });
      });
    }
  });

  it('works on disjoint views of one flat buffer and honours update()', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(30);
    const size = 130;
    const stride = alignElements(size);
    const flat = createTensor(gpu, [3 * stride], 'flat');
    const [y, dy, dx] = ['y', 'dy', 'dx'].map((label, i) => tensorView(flat, i * stride, [size], label));
    const yData = Float32Array.from(reluRef(randomArray(rand, size)));
    const gData = randomArray(rand, size);
    writeTensor(gpu, y, yData);
    writeTensor(gpu, dy, gData);
    const kernel = reluBackward(gpu, { y, dy, dx }, { size });
    kernel.update({ size: 100 });
    await withValidation(gpu, () => submitCalls(gpu, [kernel.call]));
    const ref = Float64Array.from(reluBackwardRef(yData, gData), (v, i) => (i < 100 ? v : 0));
    expectClose(await readTensor(gpu, dx), ref, { atol: 0, rtol: 0, label: 'first 100 of 130' });
  });

  it('rejects a size larger than the tensors and y aliasing a gradient', async () => {
    const gpu = await nodeGpu();
    const a = createTensor(gpu, [8], 'a');
    const b = createTensor(gpu, [8], 'b');
    expect(() => reluForward(gpu, { x: a, out: b }, { size: 9 })).toThrow(/exceeds/);
    expect(() => reluBackward(gpu, { y: a, dy: a, dx: b }, { size: 8 })).toThrow(/y must not/);
  });
});
