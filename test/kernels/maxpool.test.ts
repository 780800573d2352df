import { describe, expect, it } from 'vitest';
import { maxPoolBackward, maxPoolForward, poolOutputShape, type PoolDims } from '../../kernels/ops/maxpool';
import {
  createTensor,
  readBuffer,
  readTensor,
  submitCalls,
  tensorView,
  writeTensor,
  type Gpu,
  type Tensor,
} from '../../kernels/runtime';
import { expectClose, finiteDifferences } from '../support/compare';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { maxPoolBackwardRef, maxPoolForwardRef } from '../support/reference-conv';
import { mulberry32, randomArray } from '../support/rng';

/** Distinct values (a shuffled ramp, spacing 1/n) so no window has a tie and finite differences are exact. */
function distinctValues(rand: () => number, n: number): Float32Array {
  const v = Float32Array.from({ length: n }, (_, i) => (i - n / 2) / n);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [v[i], v[j]] = [v[j], v[i]];
  }
  return v;
}

async function readU32(gpu: Gpu, t: Tensor): Promise<Uint32Array> {
  return new Uint32Array(await readBuffer(gpu, t.buffer, t.offset + t.size * 4), t.offset, t.size);
}

const elements = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

describe('max pool 2×2 stride 2', () => {
  const shapes: PoolDims[] = [
    { batch: 2, height: 7, width: 9, channels: 3 },
    { batch: 1, height: 5, width: 4, channels: 1 },
    { batch: 3, height: 6, width: 6, channels: 5 },
  ];
  for (const dims of shapes) {
    it(`forward, argmax and backward match the reference on ${dims.batch}×${dims.height}×${dims.width}×${dims.channels}`, async () => {
      const gpu = await nodeGpu();
      const rand = mulberry32(dims.height * 100 + dims.width);
      const inShape = [dims.batch, dims.height, dims.width, dims.channels];
      const outShape = poolOutputShape(dims);
      const xs = distinctValues(rand, elements(inShape));
      const g = randomArray(rand, elements(outShape));
      const x = createTensor(gpu, inShape, 'x', xs);
      const out = createTensor(gpu, outShape, 'out');
      const argmax = createTensor(gpu, outShape, 'argmax');
      const dy = createTensor(gpu, outShape, 'dy', g);
      // dx starts as NaN: every element must be overwritten (zeros where the element lost).
      const dx = createTensor(gpu, inShape, 'dx', new Float32Array(elements(inShape)).fill(NaN));
      await withValidation(gpu, () =>
        submitCalls(gpu, [
          maxPoolForward(gpu, { x, out, argmax }, dims).call,
          maxPoolBackward(gpu, { dy, argmax, dx }, dims).call,
        ]),
      );

      const ref = maxPoolForwardRef(xs, dims);
      expectClose(await readTensor(gpu, out), ref.out, { atol: 0, rtol: 0, label: 'pooled' });
      expect(Array.from(await readU32(gpu, argmax))).toEqual(Array.from(ref.argmax));
      const gotDx = await readTensor(gpu, dx);
      expectClose(gotDx, maxPoolBackwardRef(xs, g, dims), { atol: 0, rtol: 0, label: 'dx vs reference' });

      // Independent of the reference's argmax: central differences of L(x) = Σ g ⊙ maxpool(x).
      const loss = (v: Float64Array) => maxPoolForwardRef(v, dims).out.reduce((s, y, i) => s + y * g[i], 0);
      const fd = finiteDifferences(loss, xs, { eps: 1e-4 });
      expectClose(gotDx, fd, { atol: 1e-5, rtol: 1e-4, label: 'dx vs finite differences' });
    });
  }

  it('follows update() to a smaller batch, leaving the rest of the buffers alone', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(5);
    const big: PoolDims = { batch: 4, height: 5, width: 7, channels: 2 };
    const small: PoolDims = { ...big, batch: 2 };
    const inShape = [big.batch, big.height, big.width, big.channels];
    const outShape = poolOutputShape(big);
    const xs = distinctValues(rand, elements(inShape));
    const g = randomArray(rand, elements(outShape));
    const x = createTensor(gpu, inShape, 'x', xs);
    const out = createTensor(gpu, outShape, 'out', new Float32Array(elements(outShape)).fill(7));
    const argmax = createTensor(gpu, outShape, 'argmax');
    const dy = createTensor(gpu, outShape, 'dy', g);
    const dx = createTensor(gpu, inShape, 'dx', new Float32Array(elements(inShape)).fill(9));
    const forward = maxPoolForward(gpu, { x, out, argmax }, big);
    const backward = maxPoolBackward(gpu, { dy, argmax, dx }, big);
    forward.update(small);
    backward.update(small);
    await withValidation(gpu, () => submitCalls(gpu, [forward.call, backward.call]));

    const smallIn = elements([small.batch, small.height, small.width, small.channels]);
    const smallOut = elements(poolOutputShape(small));
    const ref = maxPoolForwardRef(xs.subarray(0, smallIn), small);
    const gotOut = await readTensor(gpu, out);
    expectClose(gotOut.subarray(0, smallOut), ref.out, { atol: 0, rtol: 0, label: 'pooled prefix' });
    expect(gotOut.subarray(smallOut).every((v) => v === 7)).toBe(true);
    const gotDx = await readTensor(gpu, dx);
    expectClose(
      gotDx.subarray(0, smallIn),
      maxPoolBackwardRef(xs.subarray(0, smallIn), g.subarray(0, smallOut), small),
      {
        atol: 0,
        rtol: 0,
        label: 'dx prefix',
      },
    );
    expect(gotDx.subarray(smallIn).every((v) => v === 9)).toBe(true);
    expect(() => forward.update({ ...big, batch: 5 })).toThrow(/elements/);
  });

  it('takes the first maximum on ties, as torch does', async () => {
    const gpu = await nodeGpu();
    const dims: PoolDims = { batch: 1, height: 2, width: 4, channels: 1 };
    // Window 0 is all equal; window 1 has its maximum twice, at positions 1 and 2 (row-major).
    const x = createTensor(gpu, [1, 2, 4, 1], 'x', new Float32Array([3, 3, 1, 5, 3, 3, 5, 2]));
    const out = createTensor(gpu, [1, 1, 2, 1], 'out');
    const argmax = createTensor(gpu, [1, 1, 2, 1], 'argmax');
    submitCalls(gpu, [maxPoolForward(gpu, { x, out, argmax }, dims).call]);
    expect(Array.from(await readTensor(gpu, out))).toEqual([3, 5]);
    expect(Array.from(await readU32(gpu, argmax))).toEqual([0, 3]);
  });

  it('accepts x, out, argmax, dy and dx as views of one flat buffer', async () => {
    const gpu = await nodeGpu();
    const dims: PoolDims = { batch: 1, height: 4, width: 6, channels: 2 };
    const xs = distinctValues(mulberry32(6), 48);
    const g = randomArray(mulberry32(7), 12);
    const flat = createTensor(gpu, [64 * 5], 'flat');
    const x = tensorView(flat, 0, [1, 4, 6, 2], 'x');
    const out = tensorView(flat, 64, [1, 2, 3, 2], 'out');
    const argmax = tensorView(flat, 128, [1, 2, 3, 2], 'argmax');
    const dy = tensorView(flat, 192, [1, 2, 3, 2], 'dy');
    const dx = tensorView(flat, 256, [1, 4, 6, 2], 'dx');
    writeTensor(gpu, x, xs);
    writeTensor(gpu, dy, g);
    await withValidation(gpu, () =>
      submitCalls(gpu, [
        maxPoolForward(gpu, { x, out, argmax }, dims).call,
        maxPoolBackward(gpu, { dy, argmax, dx }, dims).call,
      ]),
    );
    expectClose(await readTensor(gpu, out), maxPoolForwardRef(xs, dims).out, { atol: 0, rtol: 0, label: 'pooled' });
    expectClose(await readTensor(gpu, dx), maxPoolBackwardRef(xs, g, dims), { atol: 0, rtol: 0, label: 'dx' });
  });
});
