import { describe, expect, it } from 'vitest';
import {
  conv2dBackwardFilter,
  conv2dBackwardInput,
  conv2dForward,
  conv2dOutputSize,
  type Conv2dDims,
  type Conv2dVariant,
} from '../../kernels/ops/conv2d';
import { alignElements, createTensor, readTensor, submitCalls, tensorView, writeTensor } from '../../kernels/runtime';
import { expectClose, finiteDifferences } from '../support/compare';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { conv2dBackwardFilterRef, conv2dBackwardInputRef, conv2dForwardRef } from '../support/reference-conv';
import { mulberry32, randomArray } from '../support/rng';

const TOL = { atol: 1e-4, rtol: 1e-4 };

function shapes(d: Conv2dDims) {
  const o = conv2dOutputSize(d);
  return {
    input: [d.batch, d.height, d.width, d.inChannels],
    output: [d.batch, o.height, o.width, d.outChannels],
    weight: [d.kernel, d.kernel, d.inChannels, d.outChannels],
  };
}

const count = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

/** Seeded inputs for one shape: x, w, bias and the upstream gradient g of L = Σ g ⊙ Y. */
function inputs(d: Conv2dDims, seed: number) {
  const rand = mulberry32(seed);
  const s = shapes(d);
  return {
    x: randomArray(rand, count(s.input)),
    w: randomArray(rand, count(s.weight), -0.5, 0.5),
    bias: randomArray(rand, d.outChannels),
    g: randomArray(rand, count(s.output)),
  };
}

/** At most `limit` coordinates of a vector of length n (all when small), seeded, for finite differences. */
function sampleIndices(n: number, limit: number, seed: number): number[] {
  if (n <= limit) return [...Array(n).keys()];
  const rand = mulberry32(seed);
  return Array.from({ length: limit }, () => Math.floor(rand() * n));
}

async function runAll(d: Conv2dDims, data: ReturnType<typeof inputs>, variant: Conv2dVariant = {}, relu = false) {
  const gpu = await nodeGpu();
  const s = shapes(d);
  const x = createTensor(gpu, s.input, 'x', data.x);
  const w = createTensor(gpu, s.weight, 'w', data.w);
  const bias = createTensor(gpu, [d.outChannels], 'bias', data.bias);
  const dy = createTensor(gpu, s.output, 'dy', data.g);
  const out = createTensor(gpu, s.output, 'out', new Float32Array(count(s.output)).fill(NaN));
  const dx = createTensor(gpu, s.input, 'dx', new Float32Array(count(s.input)).fill(NaN));
  const dw = createTensor(gpu, s.weight, 'dw', new Float32Array(count(s.weight)).fill(NaN));
  await withValidation(gpu, () =>
    submitCalls(gpu, [
      conv2dForward(gpu, { x, w, bias, out }, d, { relu, ...variant }).call,
      conv2dBackwardInput(gpu, { dy, w, dx }, d, variant).call,
      conv2dBackwardFilter(gpu, { x, dy, dw }, d, variant).call,
    ]),
  );
  return { y: await readTensor(gpu, out), dx: await readTensor(gpu, dx), dw: await readTensor(gpu, dw) };
}

const cases: { name: string; dims: Conv2dDims }[] = [
  {
    name: '1×5×7×3 → 4, kernel 3 pad 1',
    dims: { batch: 1, height: 5, width: 7, inChannels: 3, outChannels: 4, kernel: 3, pad: 1 },
  },
  {
    name: '2×9×9×2 → 5, kernel 5 pad 2',
    dims: { batch: 2, height: 9, width: 9, inChannels: 2, outChannels: 5, kernel: 5, pad: 2 },
  },
  {
    name: '2×6×8×4 → 6, kernel 3 pad 0',
    dims: { batch: 2, height: 6, width: 8, inChannels: 4, outChannels: 6, kernel: 3, pad: 0 },
  },
  {
    name: '2×7×10×8 → 12, kernel 3 pad 1',
    dims: { batch: 2, height: 7, width: 10, inChannels: 8, outChannels: 12, kernel: 3, pad: 1 },
  },
  {
    name: '3×8×6×1 → 3, kernel 5 pad 2 (one input channel)',
    dims: { batch: 3, height: 8, width: 6, inChannels: 1, outChannels: 3, kernel: 5, pad: 2 },
  },
  {
    name: '1×3×5×6 → 7, kernel 1 pad 0',
    dims: { batch: 1, height: 3, width: 5, inChannels: 6, outChannels: 7, kernel: 1, pad: 0 },
  },
];

// The CNN's layers (28×28×1 → 16 and 14×14×16 → 32, 5×5 'same'), with the tiles chosen for them.
const cnnLayers: Conv2dDims[] = [
  { batch: 2, height: 28, width: 28, inChannels: 1, outChannels: 16, kernel: 5, pad: 2 },
  { batch: 2, height: 14, width: 14, inChannels: 16, outChannels: 32, kernel: 5, pad: 2 },
];

describe('conv2d (stride 1, NHWC, HWIO)', () => {
  cases.forEach(({ name, dims }, caseIndex) => {
    it(`${name}: forward, input and filter gradients match float64 references and finite differences`, async () => {
      const data = inputs(dims, 100 + caseIndex);
      const got = await runAll(dims, data);
      expectClose(got.y, conv2dForwardRef(data.x, data.w, data.bias, dims), { ...TOL, label: 'forward' });
      expectClose(got.dx, conv2dBackwardInputRef(data.g, data.w, dims), { ...TOL, label: 'dx vs reference' });
      expectClose(got.dw, conv2dBackwardFilterRef(data.x, data.g, dims), { ...TOL, label: 'dw vs reference' });

      // Independent check of both backward kernels: central differences of L = Σ g ⊙ conv(x, w),
      // evaluated with the float64 forward only. L is linear in x and in w, so a large eps is exact.
      const lossOfX = (x: Float64Array) =>
        conv2dForwardRef(x, data.w, null, dims).reduce((s, y, i) => s + y * data.g[i], 0);
      const lossOfW = (w: Float64Array) =>
        conv2dForwardRef(data.x, w, null, dims).reduce((s, y, i) => s + y * data.g[i], 0);
      const xi = sampleIndices(data.x.length, 160, 1);
      const wi = sampleIndices(data.w.length, 160, 2);
      const fdx = finiteDifferences(lossOfX, data.x, { eps: 0.5, indices: xi });
      const fdw = finiteDifferences(lossOfW, data.w, { eps: 0.5, indices: wi });
      expectClose(
        xi.map((i) => got.dx[i]),
        xi.map((i) => fdx[i]),
        { ...TOL, label: 'dx vs finite differences' },
      );
      expectClose(
        wi.map((i) => got.dw[i]),
        wi.map((i) => fdw[i]),
        { ...TOL, label: 'dw vs finite differences' },
      );
    });
  });

  for (const dims of cnnLayers) {
    it(`the CNN layer ${dims.height}×${dims.width}×${dims.inChannels} → ${dims.outChannels} matches the references`, async () => {
      const data = inputs(dims, dims.inChannels);
      const got = await runAll(dims, data, {}, true);
      expectClose(got.y, conv2dForwardRef(data.x, data.w, data.bias, dims, true), { ...TOL, label: 'forward + relu' });
      expectClose(got.dx, conv2dBackwardInputRef(data.g, data.w, dims), { ...TOL, label: 'dx' });
      expectClose(got.dw, conv2dBackwardFilterRef(data.x, data.g, dims), { atol: 1e-3, rtol: 1e-4, label: 'dw' });
    });
  }

  it('fuses ReLU into the forward pass', async () => {
    const dims = cases[1].dims;
    const data = inputs(dims, 7);
    const got = await runAll(dims, data, {}, true);
    const ref = conv2dForwardRef(data.x, data.w, data.bias, dims, true);
    expect(ref.some((v) => v === 0) && ref.some((v) => v > 0)).toBe(true);
    expectClose(got.y, ref, { ...TOL, label: 'forward + relu' });
  });

  const variants: Conv2dVariant[] = [
    { pixelsPerThread: 1, tapsPerThread: 3, channelsPerThread: 8, workgroupSize: 32 },
    { pixelsPerThread: 7, tapsPerThread: 8, channelsPerThread: 4, workgroupSize: 128 },
    { pixelsPerThread: 8, tapsPerThread: 2, channelsPerThread: 8 },
  ];
  for (const variant of variants) {
    it(`the variant ${JSON.stringify(variant)} gives the same results`, async () => {
      // Channel counts that are not multiples of 8, widths that are not multiples of the tile.
      const dims: Conv2dDims = { batch: 2, height: 5, width: 10, inChannels: 9, outChannels: 12, kernel: 3, pad: 1 };
      const data = inputs(dims, 8);
      const got = await runAll(dims, data, variant);
      expectClose(got.y, conv2dForwardRef(data.x, data.w, data.bias, dims), { ...TOL, label: 'forward' });
      expectClose(got.dx, conv2dBackwardInputRef(data.g, data.w, dims), { ...TOL, label: 'dx' });
      expectClose(got.dw, conv2dBackwardFilterRef(data.x, data.g, dims), { ...TOL, label: 'dw' });
    });
  }

  it('follows update() to a smaller batch: outputs of the active rows only, dw summed over them', async () => {
    const gpu = await nodeGpu();
    // The shape of an earlier case (same tiles, so its pipelines are reused) with one more sample.
    const big: Conv2dDims = { ...cases[1].dims, batch: 3 };
    const small: Conv2dDims = { ...big, batch: 2 };
    const data = inputs(big, 9);
    const s = shapes(big);
    const x = createTensor(gpu, s.input, 'x', data.x);
    const w = createTensor(gpu, s.weight, 'w', data.w);
    const bias = createTensor(gpu, [big.outChannels], 'bias', data.bias);
    const dy = createTensor(gpu, s.output, 'dy', data.g);
    const out = createTensor(gpu, s.output, 'out', new Float32Array(count(s.output)).fill(7));
    const dx = createTensor(gpu, s.input, 'dx', new Float32Array(count(s.input)).fill(7));
    const dw = createTensor(gpu, s.weight, 'dw');
    const kernels = [
      conv2dForward(gpu, { x, w, bias, out }, big),
      conv2dBackwardInput(gpu, { dy, w, dx }, big),
      conv2dBackwardFilter(gpu, { x, dy, dw }, big),
    ];
    for (const k of kernels) k.update(small);
    await withValidation(gpu, () =>
      submitCalls(
        gpu,
        kernels.map((k) => k.call),
      ),
    );

    const inSmall = count(shapes(small).input);
    const outSmall = count(shapes(small).output);
    const xs = data.x.subarray(0, inSmall);
    const gs = data.g.subarray(0, outSmall);
    const y = await readTensor(gpu, out);
    expectClose(y.subarray(0, outSmall), conv2dForwardRef(xs, data.w, data.bias, small), {
      ...TOL,
      label: 'forward prefix',
    });
    expect(y.subarray(outSmall).every((v) => v === 7)).toBe(true);
    const gotDx = await readTensor(gpu, dx);
    expectClose(gotDx.subarray(0, inSmall), conv2dBackwardInputRef(gs, data.w, small), { ...TOL, label: 'dx prefix' });
    expect(gotDx.subarray(inSmall).every((v) => v === 7)).toBe(true);
    expectClose(await readTensor(gpu, dw), conv2dBackwardFilterRef(xs, gs, small), {
      ...TOL,
      label: 'dw over the small batch',
    });

    expect(() => kernels[0].update({ ...big, batch: 4 })).toThrow(/elements/);
  });

  it('accepts tensors that are views of one flat buffer (as a model lays them out)', async () => {
    const gpu = await nodeGpu();
    const dims: Conv2dDims = { ...cases[0].dims, batch: 2 };
    const data = inputs(dims, 10);
    const s = shapes(dims);
    const parts = {
      x: count(s.input),
      w: count(s.weight),
      bias: dims.outChannels,
      out: count(s.output),
      dy: count(s.output),
      dx: count(s.input),
      dw: count(s.weight),
    };
    const total = Object.values(parts).reduce((a, n) => a + alignElements(n), 0);
    const flat = createTensor(gpu, [total], 'flat');
    let offset = 0;
    const view = (name: keyof typeof parts, shape: number[]) => {
      const t = tensorView(flat, offset, shape, name);
      offset += alignElements(parts[name]);
      return t;
    };
    const x = view('x', s.input);
    const w = view('w', s.weight);
    const bias = view('bias', [dims.outChannels]);
    const out = view('out', s.output);
    const dy = view('dy', s.output);
    const dx = view('dx', s.input);
    const dw = view('dw', s.weight);
    writeTensor(gpu, x, data.x);
    writeTensor(gpu, w, data.w);
    writeTensor(gpu, bias, data.bias);
    writeTensor(gpu, dy, data.g);
    await withValidation(gpu, () =>
      submitCalls(gpu, [
        conv2dForward(gpu, { x, w, bias, out }, dims).call,
        conv2dBackwardInput(gpu, { dy, w, dx }, dims).call,
        conv2dBackwardFilter(gpu, { x, dy, dw }, dims).call,
      ]),
    );
    expectClose(await readTensor(gpu, out), conv2dForwardRef(data.x, data.w, data.bias, dims), {
      ...TOL,
      label: 'forward',
    });
    expectClose(await readTensor(gpu, dx), conv2dBackwardInputRef(data.g, data.w, dims), { ...TOL, label: 'dx' });
    expectClose(await readTensor(gpu, dw), conv2dBackwardFilterRef(data.x, data.g, dims), { ...TOL, label: 'dw' });
  });
});
