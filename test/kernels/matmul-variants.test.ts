/**
 * Every matmul variant the autotuner may choose (kernels/tuning/variants.ts `candidates`), and the
 * half-precision operands of the mixed-precision mode: each against the float64 reference, and each
 * against the default tile's bits (the tuner's promise that a choice never changes a model's numbers).
 * Subgroup tiles run where the adapter offers `subgroups`; the test log lists what ran.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_MATMUL_TILE, matmul, matmulTileName, type MatmulTile } from '../../kernels/ops/matmul';
import { createTensor, readTensor, submitCalls, type Gpu } from '../../kernels/runtime';
import { candidates, MATMUL_CANDIDATES, matmulApplicable } from '../../kernels/tuning/variants';
import { float16BitsToNumber, float32BitsToFloat16Bits } from '../../core/wire/fp16';
import { expectClose, finiteDifferences } from '../support/compare';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { dot, matmulRef } from '../support/reference-dense';
import { mulberry32, randomArray } from '../support/rng';
import { describeFeatures, expectSameBits, reportVariants } from '../support/variants';

interface Case {
  m: number;
  n: number;
  k: number;
  transA?: boolean;
  transB?: boolean;
  bias?: boolean;
  relu?: boolean;
  accumulate?: boolean;
}

/** Odd sizes (partial tiles, k not a multiple of a subgroup), every transpose, every epilogue, k = 0. */
const CASES: Case[] = [
  { m: 1, n: 1, k: 1 },
  { m: 7, n: 13, k: 5, transA: true },
  { m: 33, n: 65, k: 17, transB: true, bias: true },
  { m: 70, n: 41, k: 29, transA: true, transB: true, relu: true, bias: true },
  { m: 9, n: 300, k: 130, accumulate: true },
  { m: 130, n: 9, k: 67, transA: true, accumulate: true, bias: true, relu: true },
  { m: 5, n: 6, k: 0, bias: true },
];

const f32Bits = new Uint32Array(1);
const f32View = new Float32Array(f32Bits.buffer);
/** The half nearest x (ties to even), as its bits. */
function halfBits(x: number): number {
  f32View[0] = x;
  return float32BitsToFloat16Bits(f32Bits[0]);
}

/** Values that are exact halves (so the matmul's only rounding is its float32 sums), and their packing. */
function halfOperand(rand: () => number, n: number): { values: Float32Array; packed: Uint32Array } {
  const values = new Float32Array(n);
  const packed = new Uint32Array(Math.max(1, Math.ceil(n / 2)));
  for (let i = 0; i < n; i++) {
    const h = halfBits(rand() * 2 - 1);
    values[i] = float16BitsToNumber(h);
    packed[i >> 1] |= h << (16 * (i & 1));
  }
  return { values, packed };
}

interface Run {
  out: Float32Array;
  ref: Float64Array;
}

/** One product with `tile`; operands as float32 or, per `half`, as packed halves. */
async function run(gpu: Gpu, c: Case, seed: number, tile: MatmulTile, half = { a: false, b: false }): Promise<Run> {
  const rand = mulberry32(seed);
  const { m, n, k } = c;
  const A = half.a ? halfOperand(rand, m * k) : { values: randomArray(rand, m * k), packed: null };
  const B = half.b ? halfOperand(rand, k * n) : { values: randomArray(rand, k * n), packed: null };
  const biasData = randomArray(rand, n);
  const prev = randomArray(rand, m * n);
  const upload = (o: { values: Float32Array; packed: Uint32Array | null }, label: string) =>
    o.packed
      ? createTensor(gpu, [o.packed.length], label, o.packed)
      : createTensor(gpu, [Math.max(1, o.values.length)], label, o.values.length ? o.values : new Float32Array(1));
  const a = upload(A, 'a');
  const b = upload(B, 'b');
  const bias = c.bias ? createTensor(gpu, [n], 'bias', biasData) : undefined;
  const out = createTensor(gpu, [m, n], 'out', prev);
  const opts = { ...c, tile, halfA: half.a, halfB: half.b };
  await withValidation(gpu, () => submitCalls(gpu, [matmul(gpu, { a, b, out, bias }, c, opts).call]));
  const ref = matmulRef(A.values, B.values, m, n, k, {
    transA: c.transA,
    transB: c.transB,
    relu: c.relu,
    ...(c.bias ? { bias: biasData } : {}),
    ...(c.accumulate ? { accumulateInto: prev } : {}),
  });
  const result = await readTensor(gpu, out);
  for (const t of [a, b, out, ...(bias ? [bias] : [])]) t.buffer.destroy();
  return { out: result, ref };
}

const name = (c: Case) => `${c.m}x${c.n}x${c.k}${c.transA ? ' tA' : ''}${c.transB ? ' tB' : ''}`;
const tolerance = (k: number) => ({ atol: 1e-5 + 1e-6 * k, rtol: 1e-4 });

/** The tiles this device runs, and the subgroup ones it cannot (reported, not silently skipped). */
function tiles(gpu: Gpu): { run: MatmulTile[]; notRun: { name: string; feature: string }[] } {
  const listed = [DEFAULT_MATMUL_TILE, ...MATMUL_CANDIDATES];
  return {
    run: listed.filter((t) => matmulApplicable(gpu, t)),
    notRun: listed
      .filter((t) => t.subgroups && !gpu.features.subgroups)
      .map((t) => ({ name: matmulTileName(t), feature: 'subgroups' })),
  };
}

/** The default tile, and the first workgroup-memory and subgroup tiles of `list` (those present). */
function oneOfEachKind(list: readonly MatmulTile[]): MatmulTile[] {
  const first = (kind: string) => list.filter((t) => matmulTileName(t).includes(kind)).slice(0, 1);
  return [DEFAULT_MATMUL_TILE, ...first('wgmem'), ...first('subgroups')];
}

describe('matmul variants (the autotuner candidates)', () => {
  it('every candidate matches the float64 reference and gives the default tile’s bits', async () => {
    const gpu = await nodeGpu();
    const { run: list, notRun } = tiles(gpu);
    expect(candidates(gpu, 'matmul').length).toBe(list.length);
    let seed = 1;
    for (const c of CASES) {
      const base = await run(gpu, c, seed, DEFAULT_MATMUL_TILE);
      expectClose(base.out, base.ref, { ...tolerance(c.k), label: `default ${name(c)}` });
      for (const tile of list) {
        const got = await run(gpu, c, seed, tile);
        expectClose(got.out, got.ref, { ...tolerance(c.k), label: `${matmulTileName(tile)} ${name(c)}` });
        expectSameBits(got.out, base.out, `${matmulTileName(tile)} ${name(c)}`);
      }
      seed++;
    }
    console.log(`[variants] adapter features: ${describeFeatures(gpu)}`);
    reportVariants('matmul', list.map(matmulTileName), notRun);
  });

  it('reads packed-half operands (a, b or both) exactly: the float64 product of the halves, the same bits for every tile', async () => {
    const gpu = await nodeGpu();
    const { run: list, notRun } = tiles(gpu);
    // Each tile and precision is a pipeline (~0.5 s of SwiftShader JIT): every tile with both operands
    // in halves, and one tile of each kind with one half operand (the loads are the same code).
    const kinds = oneOfEachKind(list);
    let seed = 100;
    const runs: [{ a: boolean; b: boolean }, MatmulTile[]][] = [
      [{ a: true, b: true }, list],
      [{ a: true, b: false }, kinds],
      [{ a: false, b: true }, kinds],
    ];
    for (const [half, some] of runs) {
      for (const c of CASES) {
        const base = await run(gpu, c, seed, DEFAULT_MATMUL_TILE, half);
        for (const tile of some) {
          const got = await run(gpu, c, seed, tile, half);
          const label = `${matmulTileName(tile)} half ${JSON.stringify(half)} ${name(c)}`;
          expectClose(got.out, got.ref, { ...tolerance(c.k), label });
          expectSameBits(got.out, base.out, label);
        }
        seed++;
      }
    }
    reportVariants('matmul with half operands', list.map(matmulTileName), notRun);
  });

  it('gives dX = dY·Wᵀ and dW = Xᵀ·dY equal to finite differences with every tile (half W and X for the f16 mode)', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(400);
    const [rows, inputs, outputs] = [11, 23, 9];
    const X = halfOperand(rand, rows * inputs);
    const W = halfOperand(rand, inputs * outputs);
    const gData = randomArray(rand, rows * outputs);
    const lossOfX = (xs: Float64Array): number => dot(gData, matmulRef(xs, W.values, rows, outputs, inputs));
    const lossOfW = (ws: Float64Array): number => dot(gData, matmulRef(X.values, ws, rows, outputs, inputs));
    const fdX = finiteDifferences(lossOfX, X.values);
    const fdW = finiteDifferences(lossOfW, W.values);
    const { run: list } = tiles(gpu);
    // The backward shapes are the forward kernel with transposes (uniforms): one tile of each kind.
    const kinds = oneOfEachKind(list);
    for (const tile of kinds) {
      for (const half of [false, true]) {
        const g = createTensor(gpu, [rows, outputs], 'dY', gData);
        const x = half
          ? createTensor(gpu, [X.packed.length], 'X', X.packed)
          : createTensor(gpu, [rows, inputs], 'X', X.values);
        const w = half
          ? createTensor(gpu, [W.packed.length], 'W', W.packed)
          : createTensor(gpu, [inputs, outputs], 'W', W.values);
        const dx = createTensor(gpu, [rows, inputs], 'dX');
        const dw = createTensor(gpu, [inputs, outputs], 'dW');
        await withValidation(gpu, () => {
          const backX = matmul(
            gpu,
            { a: g, b: w, out: dx },
            { m: rows, n: inputs, k: outputs },
            { transB: true, halfB: half, tile },
          );
          const backW = matmul(
            gpu,
            { a: x, b: g, out: dw },
            { m: inputs, n: outputs, k: rows },
            { transA: true, halfA: half, tile },
          );
          submitCalls(gpu, [backX.call, backW.call]);
        });
        const label = `${matmulTileName(tile)}${half ? ' half' : ''}`;
        expectClose(await readTensor(gpu, dx), fdX, { atol: 1e-4, rtol: 1e-3, label: `dX ${label}` });
        expectClose(await readTensor(gpu, dw), fdW, { atol: 1e-4, rtol: 1e-3, label: `dW ${label}` });
      }
    }
  });

  it('refuses a subgroup tile without the feature or with a second workgroup row', async () => {
    const gpu = await nodeGpu();
    const t = createTensor(gpu, [16], 't');
    const tile: MatmulTile = { tm: 4, tn: 4, wgX: 8, wgY: 2, workgroupMemory: false, subgroups: true };
    expect(() =>
      matmul(gpu, { a: t, b: t, out: createTensor(gpu, [16], 'o') }, { m: 4, n: 4, k: 4 }, { tile }),
    ).toThrow(gpu.features.subgroups ? /wgY 1/ : /subgroups feature/);
  });
});
