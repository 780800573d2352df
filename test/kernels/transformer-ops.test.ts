/**
 * The transformer's kernels against hand-written float64 references (test/support/reference-transformer.ts)
 * on odd shapes, and every backward kernel also against central finite differences of the float64 forward
 * (a scalar Σ G ⊙ f(x) with a random G). Also: repeated runs give bit-identical gradients (no atomics).
 */
import { describe, expect, it } from 'vitest';
import { attentionBackward, attentionForward } from '../../kernels/ops/attention';
import { embeddingBackwardPositions, embeddingBackwardTokens, embeddingForward } from '../../kernels/ops/embedding';
import { geluBackward, geluForward } from '../../kernels/ops/gelu';
import {
  layerNormBackwardInput,
  layerNormBackwardParams,
  layerNormForward,
  type LayerNormVariant,
} from '../../kernels/ops/layernorm';
import { expectSameBits, reportVariants } from '../support/variants';
import { residualAdd } from '../../kernels/ops/residual';
import { createTensor, readTensor, submitCalls, type Gpu } from '../../kernels/runtime';
import { expectClose, finiteDifferences } from '../support/compare';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { dot } from '../support/reference-dense';
import {
  attentionBackwardRef,
  attentionRef,
  embeddingBackwardRef,
  embeddingRef,
  geluBackwardRef,
  geluRef,
  layerNormBackwardRef,
  layerNormRef,
  type AttentionShape,
} from '../support/reference-transformer';
import { mulberry32, randomArray, randomInt } from '../support/rng';

const tensor = (gpu: Gpu, data: Float32Array | Uint32Array, label: string) =>
  createTensor(gpu, [data.length], label, data);
const zeros = (gpu: Gpu, n: number, label: string) => createTensor(gpu, [n], label);

/** Finite differences of Σ g ⊙ f(x) at a few coordinates (all when x is short). */
function fdCheck(
  got: ArrayLike<number>,
  f: (x: Float64Array) => Float64Array,
  x: ArrayLike<number>,
  g: ArrayLike<number>,
  label: string,
  count = 40,
): void {
  const rand = mulberry32(99);
  const indices =
    x.length <= count
      ? [...Array(x.length).keys()]
      : Array.from({ length: count }, () => randomInt(rand, 0, x.length - 1));
  const fd = finiteDifferences((xs) => dot(g, f(xs)), x, { eps: 1e-4, indices });
  expectClose(
    indices.map((i) => got[i]),
    indices.map((i) => fd[i]),
    { atol: 2e-4, rtol: 2e-3, label },
  );
}

describe('embedding', () => {
  it('forward, token and position backward match float64 and finite differences; repeat runs are bit-identical', async () => {
    const gpu = await nodeGpu();
    let seed = 1;
    for (const [batch, context, dim, vocab] of [
      [1, 1, 1, 1],
      [3, 5, 7, 11],
      [2, 17, 33, 256],
    ]) {
      const rand = mulberry32(seed++);
      const rows = batch * context;
      // Few distinct tokens so rows collide in the scatter-add.
      const tokens = Uint32Array.from({ length: rows }, () => randomInt(rand, 0, Math.min(vocab, 4) - 1));
      const wte = randomArray(rand, vocab * dim);
      const wpe = randomArray(rand, context * dim);
      const g = randomArray(rand, rows * dim);
      const prior = randomArray(rand, vocab * dim);
      const dims = { batch, context, dim, vocab };
      const T = tensor(gpu, tokens, 'tokens');
      const out = zeros(gpu, rows * dim, 'out');
      const dout = tensor(gpu, g, 'dout');
      const dwte = tensor(gpu, prior, 'dwte');
      const dwpe = zeros(gpu, context * dim, 'dwpe');
      const dwte2 = zeros(gpu, vocab * dim, 'dwte2');
      await withValidation(gpu, async () => {
        submitCalls(gpu, [
          embeddingForward(gpu, { tokens: T, wte: tensor(gpu, wte, 'wte'), wpe: tensor(gpu, wpe, 'wpe'), out }, dims)
            .call,
          embeddingBackwardTokens(gpu, { tokens: T, dout, dwte }, dims, { accumulate: true }).call,
          embeddingBackwardTokens(gpu, { tokens: T, dout, dwte: dwte2 }, dims).call,
          embeddingBackwardPositions(gpu, { dout, dwpe }, dims).call,
        ]);
      });
      const label = `${batch}x${context}x${dim} vocab ${vocab}`;
      // One float32 addition, correctly rounded: exact against the float64 sum rounded to float32.
      expectClose(await readTensor(gpu, out), Float32Array.from(embeddingRef(tokens, wte, wpe, context, dim)), {
        atol: 0,
        rtol: 0,
        label,
      });
      const ref = embeddingBackwardRef(tokens, g, vocab, context, dim);
      const gotWte = await readTensor(gpu, dwte2);
      expectClose(gotWte, ref.dwte, { atol: 1e-6, rtol: 1e-6, label: `dwte ${label}` });
      expectClose(
        await readTensor(gpu, dwte),
        ref.dwte.map((v, i) => v + prior[i]),
        { atol: 1e-6, label: `dwte += ${label}` },
      );
      const gotWpe = await readTensor(gpu, dwpe);
      expectClose(gotWpe, ref.dwpe, { atol: 1e-6, rtol: 1e-6, label: `dwpe ${label}` });
      fdCheck(gotWte, (w) => embeddingRef(tokens, w, wpe, context, dim), wte, g, `dwte fd ${label}`);
      fdCheck(gotWpe, (p) => embeddingRef(tokens, wte, p, context, dim), wpe, g, `dwpe fd ${label}`);
      // Determinism: a second run of the scatter-add gives the same bits.
      submitCalls(gpu, [embeddingBackwardTokens(gpu, { tokens: T, dout, dwte: dwte2 }, dims).call]);
      expect(Array.from(await readTensor(gpu, dwte2))).toEqual(Array.from(gotWte));
    }
  });

  it('makes the row of an out-of-vocabulary token NaN and rejects short tensors', async () => {
    const gpu = await nodeGpu();
    const dims = { batch: 1, context: 2, dim: 3, vocab: 4 };
    const out = zeros(gpu, 6, 'out');
    const t = {
      tokens: tensor(gpu, Uint32Array.from([1, 9]), 'tok'),
      wte: zeros(gpu, 12, 'wte'),
      wpe: zeros(gpu, 6, 'wpe'),
    };
    submitCalls(gpu, [embeddingForward(gpu, { ...t, out }, dims).call]);
    const got = await readTensor(gpu, out);
    expect(Array.from(got.subarray(0, 3))).toEqual([0, 0, 0]);
    expect(Array.from(got.subarray(3)).every(Number.isNaN)).toBe(true);
    expect(() => embeddingForward(gpu, { ...t, out }, { ...dims, vocab: 5 })).toThrow(/wte has 12 elements/);
  });
});

describe('layerNorm', () => {
  it('forward and both backward kernels match float64 and finite differences, the quad variant with the same bits', async () => {
    const gpu = await nodeGpu();
    // The default, and four invocations per row through subgroup shuffles where the adapter has them.
    const variants: LayerNormVariant[] = [{}, ...(gpu.features.subgroups ? [{ subgroups: true }] : [])];
    let seed = 10;
    for (const [rows, dim] of [
      [1, 1],
      [1, 2],
      [7, 5],
      [65, 33],
      [130, 128],
    ]) {
      const rand = mulberry32(seed++);
      const x = randomArray(rand, rows * dim, -2, 3);
      const gain = randomArray(rand, dim, 0.5, 1.5);
      const bias = randomArray(rand, dim);
      const g = randomArray(rand, rows * dim);
      const prior = randomArray(rand, rows * dim);
      const dims = { rows, dim };
      const outputs: Float32Array[][] = [];
      for (const variant of variants) {
        const X = tensor(gpu, x, 'x');
        const G = tensor(gpu, gain, 'gain');
        const stats = zeros(gpu, 2 * rows, 'stats');
        const y = zeros(gpu, rows * dim, 'y');
        const dy = tensor(gpu, g, 'dy');
        const dx = zeros(gpu, rows * dim, 'dx');
        const dxAcc = tensor(gpu, prior, 'dx-acc');
        const dgain = zeros(gpu, dim, 'dgain');
        const dbias = zeros(gpu, dim, 'dbias');
        await withValidation(gpu, () =>
          submitCalls(gpu, [
            layerNormForward(gpu, { x: X, gain: G, bias: tensor(gpu, bias, 'bias'), y, stats }, dims, variant).call,
            layerNormBackwardInput(gpu, { x: X, stats, gain: G, dy, dx }, dims, { variant }).call,
            layerNormBackwardInput(gpu, { x: X, stats, gain: G, dy, dx: dxAcc }, dims, { accumulate: true, variant })
              .call,
            layerNormBackwardParams(gpu, { x: X, stats, dy, dgain, dbias }, dims, variant).call,
          ]),
        );
        const label = `${rows}x${dim}${variant.subgroups ? ' quads' : ''}`;
        const gotY = await readTensor(gpu, y);
        expectClose(gotY, layerNormRef(x, gain, bias, rows, dim), { atol: 2e-5, rtol: 1e-4, label });
        const ref = layerNormBackwardRef(x, gain, g, rows, dim);
        const gotDx = await readTensor(gpu, dx);
        expectClose(gotDx, ref.dx, { atol: 1e-4, rtol: 1e-4, label: `dx ${label}` });
        const gotAcc = await readTensor(gpu, dxAcc);
        expectClose(
          gotAcc,
          ref.dx.map((v, i) => v + prior[i]),
          { atol: 1e-4, label: `dx += ${label}` },
        );
        const gotGain = await readTensor(gpu, dgain);
        expectClose(gotGain, ref.dgain, { atol: 1e-4, rtol: 1e-4, label: `dgain ${label}` });
        expectClose(await readTensor(gpu, dbias), ref.dbias, { atol: 1e-4, rtol: 1e-4, label: `dbias ${label}` });
        fdCheck(gotDx, (xs) => layerNormRef(xs, gain, bias, rows, dim), x, g, `dx fd ${label}`);
        fdCheck(gotGain, (gs) => layerNormRef(x, gs, bias, rows, dim), gain, g, `dgain fd ${label}`);
        const now = [gotY, await readTensor(gpu, stats), gotDx, gotAcc];
        if (outputs.length > 0)
          for (const [i, o] of now.entries()) expectSameBits(o, outputs[0][i], `${label} output ${i}`);
        outputs.push(now);
      }
    }
    reportVariants(
      'layernorm kernels',
      variants.map((v) => (v.subgroups ? 'quads (subgroups)' : 'one invocation per row')),
      gpu.features.subgroups ? [] : [{ name: 'quads', feature: 'subgroups' }],
    );
  });
});

describe('gelu', () => {
  it('forward and backward (tanh form) match float64 and finite differences, also for large |x|', async () => {
    const gpu = await nodeGpu();
    let seed = 20;
    for (const size of [1, 7, 257, 10_001]) {
      const rand = mulberry32(seed++);
      const x = randomArray(rand, size, -4, 4);
      if (size > 2) x.set([40, -40]);
      const g = randomArray(rand, size);
      const X = tensor(gpu, x, 'x');
      const y = zeros(gpu, size, 'y');
      const dx = zeros(gpu, size, 'dx');
      await withValidation(gpu, () =>
        submitCalls(gpu, [
          geluForward(gpu, { x: X, y }, { size }).call,
          geluBackward(gpu, { x: X, dy: tensor(gpu, g, 'dy'), dx }, { size }).call,
        ]),
      );
      expectClose(await readTensor(gpu, y), geluRef(x), { atol: 1e-6, rtol: 1e-5, label: `gelu ${size}` });
      const gotDx = await readTensor(gpu, dx);
      expectClose(gotDx, geluBackwardRef(x, g), { atol: 1e-6, rtol: 1e-5, label: `dgelu ${size}` });
      fdCheck(gotDx, (xs) => geluRef(xs), x, g, `dgelu fd ${size}`, 60);
    }
  });
});

describe('residualAdd', () => {
  it('adds exactly and refuses to write over an operand', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(30);
    const a = randomArray(rand, 333);
    const b = randomArray(rand, 333);
    const out = zeros(gpu, 333, 'out');
    const A = tensor(gpu, a, 'a');
    submitCalls(gpu, [residualAdd(gpu, { a: A, b: tensor(gpu, b, 'b'), out }, { size: 333 }).call]);
    expectClose(
      await readTensor(gpu, out),
      Float32Array.from(a, (v, i) => v + b[i]),
      { atol: 0, rtol: 0 },
    );
    expect(() => residualAdd(gpu, { a: A, b: out, out: A }, { size: 333 })).toThrow(/must not/);
  });
});

describe('causal attention', () => {
  it('forward and backward match float64 and finite differences on odd shapes, bit-identical on repeat', async () => {
    const gpu = await nodeGpu();
    let seed = 40;
    const shapes: AttentionShape[] = [
      { batch: 1, context: 1, dim: 1, heads: 1 },
      { batch: 2, context: 5, dim: 6, heads: 3 },
      { batch: 3, context: 9, dim: 8, heads: 2 },
      { batch: 1, context: 33, dim: 20, heads: 4 },
    ];
    for (const s of shapes) {
      const rand = mulberry32(seed++);
      const qkvData = randomArray(rand, s.batch * s.context * 3 * s.dim, -1.5, 1.5);
      const g = randomArray(rand, s.batch * s.context * s.dim);
      const scores = s.batch * s.heads * s.context * s.context;
      const qkv = tensor(gpu, qkvData, 'qkv');
      const probs = zeros(gpu, scores, 'probs');
      const y = zeros(gpu, s.batch * s.context * s.dim, 'y');
      const dy = tensor(gpu, g, 'dy');
      const dscores = zeros(gpu, scores, 'dscores');
      const dqkv = tensor(gpu, new Float32Array(qkvData.length).fill(7), 'dqkv');
      const backward = attentionBackward(gpu, { qkv, probs, dy, dscores, dqkv }, s);
      await withValidation(gpu, () =>
        submitCalls(gpu, [attentionForward(gpu, { qkv, probs, y }, s).call, ...backward.map((k) => k.call)]),
      );
      const label = JSON.stringify(s);
      const ref = attentionRef(qkvData, s);
      expectClose(await readTensor(gpu, y), ref.y, { atol: 1e-5, rtol: 1e-4, label: `y ${label}` });
      expectClose(await readTensor(gpu, probs), ref.probs, { atol: 1e-6, rtol: 1e-4, label: `probs ${label}` });
      const got = await readTensor(gpu, dqkv);
      expectClose(got, attentionBackwardRef(qkvData, g, s), { atol: 1e-5, rtol: 1e-4, label: `dqkv ${label}` });
      fdCheck(got, (q) => attentionRef(q, s).y, qkvData, g, `dqkv fd ${label}`, 60);
      submitCalls(
        gpu,
        backward.map((k) => k.call),
      );
      expect(Array.from(await readTensor(gpu, dqkv))).toEqual(Array.from(got));
    }
  });

  it('rejects a width that the heads do not divide', async () => {
    const gpu = await nodeGpu();
    const t = { qkv: zeros(gpu, 90, 'qkv'), probs: zeros(gpu, 75, 'p'), y: zeros(gpu, 30, 'y') };
    expect(() => attentionForward(gpu, t, { batch: 1, context: 5, dim: 6, heads: 4 })).toThrow(/multiple of heads/);
  });
});
