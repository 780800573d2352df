import { describe, expect, it } from 'vitest';
import {
  DEFAULT_MATMUL_TILE,
  WORKGROUP_MATMUL_TILE,
  matmul,
  type MatmulDims,
  type MatmulTile,
} from '../../kernels/ops/matmul';
import {
  alignElements,
  createTensor,
  readTensor,
  submitCalls,
  tensorView,
  writeTensor,
  type Gpu,
  type Tensor,
} from '../../kernels/runtime';
import { expectClose, finiteDifferences } from '../support/compare';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { dot, matmulRef, type MatmulRefOptions } from '../support/reference-dense';
import { mulberry32, randomArray } from '../support/rng';

interface Case extends MatmulDims {
  transA?: boolean;
  transB?: boolean;
}

/** float32 sums of k products of values in [-1, 1]: rounding grows about linearly in k at worst. */
function tolerance(k: number): { atol: number; rtol: number } {
  return { atol: 1e-5 + 1e-6 * k, rtol: 1e-4 };
}

const SHAPES: MatmulDims[] = [
  { m: 1, n: 1, k: 1 },
  { m: 7, n: 13, k: 5 },
  { m: 33, n: 65, k: 17 },
  { m: 128, n: 256, k: 784 },
];
const TRANSPOSES = [
  { transA: false, transB: false },
  { transA: true, transB: false },
  { transA: false, transB: true },
  { transA: true, transB: true },
];

function name(c: Case): string {
  return `${c.m}x${c.n}x${c.k}${c.transA ? ' transA' : ''}${c.transB ? ' transB' : ''}`;
}

/** Run one prepared matmul on fresh random operands and compare against the float64 reference. */
async function checkMatmul(
  gpu: Gpu,
  c: Case,
  seed: number,
  opts: { tile?: MatmulTile; bias?: boolean; relu?: boolean; accumulate?: boolean } = {},
): Promise<void> {
  const rand = mulberry32(seed);
  const { m, n, k } = c;
  const aData = randomArray(rand, m * k);
  const bData = randomArray(rand, k * n);
  const biasData = randomArray(rand, n);
  const prev = randomArray(rand, m * n);
  const a = createTensor(gpu, c.transA ? [k, m] : [m, k], 'a', aData);
  const b = createTensor(gpu, c.transB ? [n, k] : [k, n], 'b', bData);
  const bias = opts.bias ? createTensor(gpu, [n], 'bias', biasData) : undefined;
  const out = createTensor(gpu, [m, n], 'out', prev);
  await withValidation(gpu, async () => {
    const kernel = matmul(gpu, { a, b, out, bias }, c, {
      transA: c.transA,
      transB: c.transB,
      accumulate: opts.accumulate,
      relu: opts.relu,
      tile: opts.tile,
    });
    submitCalls(gpu, [kernel.call]);
    const ref: MatmulRefOptions = { transA: c.transA, transB: c.transB, relu: opts.relu };
    if (opts.bias) ref.bias = biasData;
    if (opts.accumulate) ref.accumulateInto = prev;
    expectClose(await readTensor(gpu, out), matmulRef(aData, bData, m, n, k, ref), {
      ...tolerance(k),
      label: `${name(c)} ${JSON.stringify(opts)}`,
    });
  });
}

describe('matmul', () => {
  it('matches the float64 reference for odd and large shapes under every transpose (default tile)', async () => {
    const gpu = await nodeGpu();
    let seed = 1;
    for (const shape of SHAPES) for (const tr of TRANSPOSES) await checkMatmul(gpu, { ...shape, ...tr }, seed++);
  });

  it('matches the reference with the workgroup-memory variant under every transpose', async () => {
    const gpu = await nodeGpu();
    let seed = 100;
    for (const shape of SHAPES) {
      for (const tr of TRANSPOSES) {
        // This variant is several times slower on SwiftShader: the large shape runs untransposed only.
        if (shape.k > 100 && (tr.transA || tr.transB)) continue;
        await checkMatmul(gpu, { ...shape, ...tr }, seed++, { tile: WORKGROUP_MATMUL_TILE });
      }
    }
  });

  it('is correct for other register tiles and workgroup shapes, with and without workgroup memory', async () => {
    const gpu = await nodeGpu();
    const tiles: MatmulTile[] = [
      { tm: 4, tn: 4, wgX: 8, wgY: 8, workgroupMemory: false },
      { tm: 3, tn: 5, wgX: 8, wgY: 8, workgroupMemory: false },
      { tm: 8, tn: 6, wgX: 4, wgY: 4, workgroupMemory: false },
      { tm: 3, tn: 8, wgX: 8, wgY: 4, workgroupMemory: true, tk: 12 },
      { tm: 1, tn: 1, wgX: 16, wgY: 16, workgroupMemory: true, tk: 4 },
    ];
    let seed = 200;
    for (const tile of tiles) {
      for (const c of [
        { m: 7, n: 13, k: 5, transA: true },
        { m: 33, n: 65, k: 17, transB: true },
        { m: 70, n: 41, k: 29 },
      ]) {
        await checkMatmul(gpu, c, seed++, { tile });
      }
    }
  });

  it('fuses the bias, ReLU and accumulation epilogue', async () => {
    const gpu = await nodeGpu();
    let seed = 300;
    for (const tile of [DEFAULT_MATMUL_TILE, WORKGROUP_MATMUL_TILE]) {
      // k = 0 leaves only the epilogue: out = relu(prev + bias).
      for (const c of [
        { m: 33, n: 65, k: 17 },
        { m: 9, n: 10, k: 130, transA: true },
        { m: 12, n: 7, k: 3, transB: true },
        { m: 5, n: 6, k: 0 },
      ]) {
        await checkMatmul(gpu, c, seed++, { tile, bias: true });
        await checkMatmul(gpu, c, seed++, { tile, bias: true, relu: true });
        await checkMatmul(gpu, c, seed++, { tile, accumulate: true });
        await checkMatmul(gpu, c, seed++, { tile, accumulate: true, bias: true, relu: true });
      }
    }
  });

  it('gives dX = dY·Wᵀ (transB) and dW = Xᵀ·dY (transA) equal to finite differences of Σ G⊙(X·W)', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(400);
    const [rows, inputs, outputs] = [11, 23, 9];
    const xData = randomArray(rand, rows * inputs);
    const wData = randomArray(rand, inputs * outputs);
    const gData = randomArray(rand, rows * outputs);
    const g = createTensor(gpu, [rows, outputs], 'dY', gData);
    const x = createTensor(gpu, [rows, inputs], 'X', xData);
    const w = createTensor(gpu, [inputs, outputs], 'W', wData);
    const dx = createTensor(gpu, [rows, inputs], 'dX');
    const dw = createTensor(gpu, [inputs, outputs], 'dW');
    await withValidation(gpu, async () => {
      const backX = matmul(gpu, { a: g, b: w, out: dx }, { m: rows, n: inputs, k: outputs }, { transB: true });
      const backW = matmul(gpu, { a: x, b: g, out: dw }, { m: inputs, n: outputs, k: rows }, { transA: true });
      submitCalls(gpu, [backX.call, backW.call]);
    });
    const lossOfX = (xs: Float64Array): number => dot(gData, matmulRef(xs, wData, rows, outputs, inputs));
    const lossOfW = (ws: Float64Array): number => dot(gData, matmulRef(xData, ws, rows, outputs, inputs));
    const fdX = finiteDifferences(lossOfX, xData);
    const fdW = finiteDifferences(lossOfW, wData);
    expectClose(await readTensor(gpu, dx), fdX, { atol: 1e-4, rtol: 1e-3, label: 'dX vs finite differences' });
    expectClose(await readTensor(gpu, dw), fdW, { atol: 1e-4, rtol: 1e-3, label: 'dW vs finite differences' });
  });

  it('works on 256-byte aligned views of one flat buffer (parameters and activations packed together)', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(500);
    const [m, n, k] = [5, 6, 7];
    const sizes = [m * k, k * n, n, m * n];
    const offsets: number[] = [];
    let total = 0;
    for (const s of sizes) {
      offsets.push(total);
      total += alignElements(s);
    }
    const flat = createTensor(gpu, [total], 'flat');
    const [a, b, bias, out] = ['a', 'b', 'bias', 'out'].map((label, i) =>
      tensorView(flat, offsets[i], [sizes[i]], label),
    );
    const [aData, bData, biasData] = [
      randomArray(rand, sizes[0]),
      randomArray(rand, sizes[1]),
      randomArray(rand, sizes[2]),
    ];
    writeTensor(gpu, a, aData);
    writeTensor(gpu, b, bData);
    writeTensor(gpu, bias, biasData);
    await withValidation(gpu, () =>
      submitCalls(gpu, [matmul(gpu, { a, b, bias, out }, { m, n, k }, { relu: true }).call]),
    );
    expectClose(await readTensor(gpu, out), matmulRef(aData, bData, m, n, k, { bias: biasData, relu: true }), {
      ...tolerance(k),
      label: 'views',
    });
  });

  it('update() to fewer rows recomputes only those rows and leaves the rest untouched', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(600);
    for (const tile of [DEFAULT_MATMUL_TILE, WORKGROUP_MATMUL_TILE]) {
      const [maxRows, n, k] = [64, 19, 21];
      const aData = randomArray(rand, maxRows * k);
      const bData = randomArray(rand, k * n);
      const a = createTensor(gpu, [maxRows, k], 'a', aData);
      const b = createTensor(gpu, [k, n], 'b', bData);
      const out = createTensor(gpu, [maxRows, n], 'out');
      await withValidation(gpu, async () => {
        const kernel = matmul(gpu, { a, b, out }, { m: maxRows, n, k }, { tile });
        submitCalls(gpu, [kernel.call]);
        expectClose(await readTensor(gpu, out), matmulRef(aData, bData, maxRows, n, k), {
          ...tolerance(k),
          label: 'max rows',
        });
        // Fewer rows with new data: rows past 13 must keep the first result.
        const first = Float64Array.from(await readTensor(gpu, out));
        const aNext = randomArray(rand, maxRows * k);
        writeTensor(gpu, a, aNext);
        kernel.update({ m: 13, n, k });
        submitCalls(gpu, [kernel.call]);
        const expected = Float64Array.from(first);
        expected.set(matmulRef(aNext, bData, 13, n, k));
        expectClose(await readTensor(gpu, out), expected, {
          ...tolerance(k),
          label: `13 rows (${tile.workgroupMemory ? 'workgroup' : 'registers'})`,
        });
      });
    }
  });

  it('update() to 0 rows dispatches nothing', async () => {
    const gpu = await nodeGpu();
    const a = createTensor(gpu, [4, 4], 'a');
    const kernel = matmul(gpu, { a, b: a, out: createTensor(gpu, [4, 4], 'out') }, { m: 4, n: 4, k: 4 });
    kernel.update({ m: 0, n: 4, k: 4 });
    expect(kernel.call.workgroups[0] * kernel.call.workgroups[1] * kernel.call.workgroups[2]).toBe(0);
  });

  it('rejects tensors too small for the dims and tiles outside the supported range', async () => {
    const gpu = await nodeGpu();
    const t = (shape: number[]): Tensor => createTensor(gpu, shape, 't');
    expect(() => matmul(gpu, { a: t([4, 5]), b: t([5, 6]), out: t([4, 5]) }, { m: 4, n: 6, k: 5 })).toThrow(/out/);
    expect(() =>
      matmul(gpu, { a: t([4, 5]), b: t([5, 6]), out: t([4, 6]), bias: t([5]) }, { m: 4, n: 6, k: 5 }),
    ).toThrow(/bias/);
    const ok = matmul(gpu, { a: t([4, 5]), b: t([5, 6]), out: t([4, 6]) }, { m: 4, n: 6, k: 5 });
    expect(() => ok.update({ m: 5, n: 6, k: 5 })).toThrow(/needs/);
    expect(() =>
      matmul(
        gpu,
        { a: t([1]), b: t([1]), out: t([1]) },
        { m: 1, n: 1, k: 1 },
        { tile: { ...DEFAULT_MATMUL_TILE, tm: 9 } },
      ),
    ).toThrow(/tile/);
    expect(() =>
      matmul(
        gpu,
        { a: t([1]), b: t([1]), out: t([1]) },
        { m: 1, n: 1, k: 1 },
        { tile: { ...WORKGROUP_MATMUL_TILE, tk: 6 } },
      ),
    ).toThrow(/workgroup/);
  });
});
