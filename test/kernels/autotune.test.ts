/**
 * The autotuner on a real model (kernels/tuning/autotune.ts) and its cache (choice.ts): it checks each
 * candidate's bits before timing it, keeps the fastest within its budget, and a second start on the same
 * adapter and shapes takes the cached choice without timing anything.
 */
import { describe, expect, it } from 'vitest';
import { parameterLayout, resolveModelSpec } from '../../core/training/model-spec';
import { autotune, type TuneRequest } from '../../kernels/tuning/autotune';
import { chooseVariants, memoryTuningStore, tuningKey, type AdapterIdentity } from '../../kernels/tuning/choice';
import { candidates, DEFAULT_VARIANTS, FAMILIES, sameVariant } from '../../kernels/tuning/variants';
import { nodeGpu } from '../support/node-gpu';

const ADAMW = { kind: 'adamw', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 } as const;
const ADAPTER: AdapterIdentity = {
  vendor: 'google',
  architecture: 'swiftshader',
  device: 'test',
  description: 'SwiftShader under test',
  isFallback: true,
};

function request(model: string, overrides: Partial<TuneRequest> = {}): TuneRequest {
  const spec = resolveModelSpec(model);
  return {
    spec,
    layout: parameterLayout(spec),
    maxBatch: 16,
    optimizer: ADAMW,
    precision: 'f32',
    budgetMs: 2000,
    minSampleMs: 5,
    ...overrides,
  };
}

describe('autotune', () => {
  it('times the families a model has, keeps candidates of this device, and measures its matmul GFLOP/s', async () => {
    const gpu = await nodeGpu();
    const tile = DEFAULT_VARIANTS.matmul;
    // Two matmul candidates and two optimizer ones keep the test short; a third matmul tile is invalid
    // (too many invocations per workgroup) and must be refused, not timed.
    const invalid = { ...tile, wgX: 64, wgY: 64 };
    const result = await autotune(
      gpu,
      request('tiny-mlp', {
        budgetMs: 60_000,
        candidates: {
          matmul: [tile, { tm: 4, tn: 4, wgX: 8, wgY: 8, workgroupMemory: false }, invalid],
          optimizer: [DEFAULT_VARIANTS.optimizer, { workgroupSize: 64, elementsPerThread: 4 }],
        },
      }),
    );
    const tuned = result.families.map((f) => f.family);
    expect(tuned).toEqual(['matmul', 'optimizer']);
    const matmul = result.families[0];
    expect(matmul.timed).toBe(2);
    expect(matmul.refused).toHaveLength(1);
    expect(matmul.refused[0]).toMatch(/^8x8 regs wg64x64: /);
    expect(matmul.chosenMs).toBeLessThanOrEqual(matmul.defaultMs);
    expect(result.matmulGflops).toBeGreaterThan(0);
    for (const family of FAMILIES)
      expect(candidates(gpu, family).some((c) => sameVariant(c, result.variants[family]))).toBe(true);
  });

  it('stops starting candidates when the budget is spent and keeps the best so far', async () => {
    const gpu = await nodeGpu();
    const result = await autotune(gpu, request('tiny-mlp', { budgetMs: 0 }));
    for (const f of result.families) {
      expect(f.timed).toBe(1);
      expect(f.skipped).toBe(candidates(gpu, f.family).length - 1);
    }
    expect(result.variants).toEqual(DEFAULT_VARIANTS);
  });
});

describe('the tuning cache', () => {
  it('tunes at the first start on an adapter and takes the cached choice at the second, timing nothing', async () => {
    const gpu = await nodeGpu();
    const store = memoryTuningStore();
    let tunings = 0;
    const tune: typeof autotune = (g, r) => {
      tunings++;
      return autotune(g, r);
    };
    const req = request('tiny-mlp', { budgetMs: 1500 });
    let announced = 0;
    const options = { store, mode: 'always' as const, tune, onTuning: () => announced++ };
    const first = await chooseVariants(gpu, ADAPTER, req, options);
    expect([first.source, tunings, announced]).toEqual(['tuned', 1, 1]);
    const second = await chooseVariants(gpu, ADAPTER, req, options);
    expect([second.source, tunings, announced]).toEqual(['cached', 1, 1]);
    expect(second.variants).toEqual(first.variants);
    expect(second.result?.families).toEqual(first.result?.families);
    // Other shapes (another batch) are another key: tuned again.
    const other = await chooseVariants(gpu, ADAPTER, { ...req, maxBatch: 8 }, options);
    expect([other.source, tunings]).toEqual(['tuned', 2]);
  });

  it('tunes again over a cached entry that does not parse or names a variant this device lacks', async () => {
    const gpu = await nodeGpu();
    const store = memoryTuningStore();
    let tunings = 0;
    const tune: typeof autotune = async () => {
      tunings++;
      return { variants: DEFAULT_VARIANTS, families: [], matmulGflops: null, tuneMs: 1 };
    };
    const req = request('tiny-mlp');
    const key = tuningKey(gpu, ADAPTER, req);
    const good = { variants: DEFAULT_VARIANTS, families: [], matmulGflops: 1.5, tuneMs: 10 };
    const hostile = [
      'not an object',
      { ...good, extra: 1 },
      { ...good, variants: { ...DEFAULT_VARIANTS, matmul: { ...DEFAULT_VARIANTS.matmul, tm: 64 } } },
      { ...good, variants: { ...DEFAULT_VARIANTS, optimizer: { workgroupSize: 1e6, elementsPerThread: 1 } } },
      { ...good, matmulGflops: -1 },
    ];
    for (const value of hostile) {
      await store.set(key, value);
      const choice = await chooseVariants(gpu, ADAPTER, req, { store, mode: 'always', tune });
      expect(choice.source).toBe('tuned');
    }
    expect(tunings).toBe(hostile.length);
    await store.set(key, good);
    expect((await chooseVariants(gpu, ADAPTER, req, { store, mode: 'always', tune })).source).toBe('cached');
  });

  it('keeps the defaults without tuning where the mode says so or the adapter is a software one', async () => {
    const gpu = await nodeGpu();
    const store = memoryTuningStore();
    const tune: typeof autotune = () => {
      throw new Error('must not tune');
    };
    const req = request('tiny-mlp');
    for (const [adapter, mode] of [
      [ADAPTER, 'gpu'],
      [{ ...ADAPTER, isFallback: false }, 'never'],
    ] as const) {
      const choice = await chooseVariants(gpu, adapter, req, { store, mode, tune });
      expect(choice).toEqual({ variants: DEFAULT_VARIANTS, source: 'default', result: null });
    }
    expect(store.entries.size).toBe(0);
  });
});
