import { describe, expect, it } from 'vitest';
import { addInto, fill, scaleInPlace } from '../../kernels/ops/elementwise';
import { createTensor, readTensor, submitCalls, tensorView } from '../../kernels/runtime';
import { expectClose } from '../support/compare';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { mulberry32, randomArray } from '../support/rng';

describe('elementwise kernels', () => {
  it('addInto adds x to y for the first `size` elements and leaves the rest alone', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(1);
    const n = 1003;
    const xs = randomArray(rand, n);
    const ys = randomArray(rand, n);
    const x = createTensor(gpu, [n], 'x', xs);
    const y = createTensor(gpu, [n], 'y', ys);
    await withValidation(gpu, async () => {
      const k = addInto(gpu, { x, y }, { size: n });
      submitCalls(gpu, [k.call]);
      const got = await readTensor(gpu, y);
      expectClose(
        got,
        Array.from(ys, (v, i) => v + xs[i]),
        { atol: 0, rtol: 1e-7, label: 'y + x' },
      );
      k.update({ size: 500 });
      submitCalls(gpu, [k.call]);
      const twice = await readTensor(gpu, y);
      const ref = Array.from(ys, (v, i) => (i < 500 ? v + 2 * xs[i] : v + xs[i]));
      expectClose(twice, ref, { atol: 1e-6, rtol: 1e-6, label: 'y + 2x on the prefix' });
    });
  });

  it('addInto accepts x and y as disjoint views of one buffer', async () => {
    const gpu = await nodeGpu();
    const flat = createTensor(
      gpu,
      [128 + 10],
      'flat',
      Float32Array.from({ length: 138 }, (_, i) => i),
    );
    const x = tensorView(flat, 0, [10], 'x');
    const y = tensorView(flat, 128, [10], 'y');
    await withValidation(gpu, async () => submitCalls(gpu, [addInto(gpu, { x, y }, { size: 10 }).call]));
    expect(Array.from(await readTensor(gpu, y))).toEqual(Array.from({ length: 10 }, (_, i) => 128 + 2 * i));
  });

  it('scaleInPlace and fill cover a dispatch wider than 65,535 workgroups', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(2);
    // Four invocations per workgroup so 300,001 elements need 75,001 workgroups: a 2-D dispatch.
    const n = 300_001;
    const xs = randomArray(rand, n);
    const x = createTensor(gpu, [n], 'x', xs);
    const scale = scaleInPlace(gpu, { x }, { size: n, alpha: -0.37 }, { workgroupSize: 4 });
    expect(scale.call.workgroups[1]).toBeGreaterThan(1);
    await withValidation(gpu, () => submitCalls(gpu, [scale.call]));
    expectClose(
      await readTensor(gpu, x),
      Array.from(xs, (v) => v * -0.37),
      { atol: 0, rtol: 1e-6, label: 'scaled' },
    );

    const zero = fill(gpu, { x }, { size: n, value: 2.5 }, { workgroupSize: 4 });
    await withValidation(gpu, () => submitCalls(gpu, [zero.call]));
    const filled = await readTensor(gpu, x);
    expect(filled.every((v) => v === 2.5)).toBe(true);
  });

  it('rejects a size larger than its tensors', async () => {
    const gpu = await nodeGpu();
    const x = createTensor(gpu, [8], 'x');
    const k = fill(gpu, { x }, { size: 8, value: 0 });
    expect(() => k.update({ size: 9, value: 0 })).toThrow(/exceeds/);
  });
});
