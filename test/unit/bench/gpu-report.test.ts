/**
 * bench:gpu's figures (bench/lib/gpu-report.ts) on hand-built results: the best variant per size and its
 * fraction of the measured peak, and the goals — judged on a hardware adapter, never on a
 * software one (SwiftShader's figures are the CPU's).
 */
import { describe, expect, it } from 'vitest';
import type { AdapterReport } from '../../../bench/lib/gpu-device';
import { goals, summarize, type GpuResult } from '../../../bench/lib/gpu-report';
import type { ModelRow } from '../../../bench/lib/gpu-models';

const ADAPTER: AdapterReport = {
  vendor: 'nvidia',
  architecture: 'hopper',
  device: 'h100',
  description: 'NVIDIA H100',
  isFallback: false,
  features: ['shader-f16', 'subgroups'],
  subgroupSizes: [32, 32],
  maxComputeInvocationsPerWorkgroup: 1024,
  maxComputeWorkgroupStorageSize: 32768,
};

const MATMUL = {
  sizes: [512, 4096],
  rows: [
    { name: '8x8 regs wg4x4', precision: 'f32' as const, gflops: [100, 3000] },
    { name: '4x4 wgmem wg16x16 tk16', precision: 'f32' as const, gflops: [200, 21000] },
    { name: '4x4 subgroups wg64', precision: 'f32' as const, gflops: [150, 30000] },
    { name: '4x4 wgmem wg16x16 tk16', precision: 'f16' as const, gflops: [220, 26000] },
    { name: '8x8 regs wg4x4', precision: 'f16' as const, gflops: [90, null] },
  ],
};

const GPT: ModelRow = {
  model: 'gpt-tiny',
  batch: 4,
  default_f32: 10,
  tuned_f32: 5,
  default_f16: 9,
  tuned_f16: 4,
  tfjs: 20,
  tuned: { f32: [], f16: [] },
  tuned_gflops: { f32: 100, f16: 120 },
  tuned_is_default: { f32: false, f16: false },
};

function result(adapter: AdapterReport): Omit<GpuResult, 'goals'> {
  const peak = 50000;
  return {
    bench: 'gpu',
    adapter,
    node: 'v20',
    tfjs: '4.22.0',
    peak_gflops: peak,
    matmul: { sizes: MATMUL.sizes, variants: MATMUL.rows },
    best: summarize(MATMUL, peak),
    models: [GPT],
    seconds: 1,
    command: 'npm run bench:gpu',
  };
}

describe('bench:gpu figures', () => {
  it('takes the fastest variant of each precision per size, and the f32 best as a fraction of the peak', () => {
    expect(summarize(MATMUL, 50000)).toEqual([
      {
        n: 512,
        f32: '4x4 wgmem wg16x16 tk16',
        f32_gflops: 200,
        f16: '4x4 wgmem wg16x16 tk16',
        f16_gflops: 220,
        peak_fraction: 0.004,
      },
      {
        n: 4096,
        f32: '4x4 subgroups wg64',
        f32_gflops: 30000,
        f16: '4x4 wgmem wg16x16 tk16',
        f16_gflops: 26000,
        peak_fraction: 0.6,
      },
    ]);
  });

  it('judges the goals on a hardware adapter: 60 % of peak met, subgroups 1.43x met, f16 0.87x missed, gpt-tiny 4x met', () => {
    expect(goals(result(ADAPTER)).map((g) => [g.value, g.met])).toEqual([
      [0.6, true],
      [1.43, true],
      [0.867, false],
      [4, true],
    ]);
  });

  it('leaves the subgroup goal unjudged when no subgroup tile ran at the largest size (pruned, not slow)', () => {
    const pruned = result(ADAPTER);
    pruned.matmul = {
      sizes: MATMUL.sizes,
      variants: MATMUL.rows.map((r) => (r.name.includes('subgroups') ? { ...r, gflops: [150, null] } : r)),
    };
    const subgroup = goals(pruned)[1];
    expect([subgroup.value, subgroup.met]).toEqual([null, null]);
  });

  it('neither meets nor misses a goal on a software adapter, and says why', () => {
    for (const g of goals(result({ ...ADAPTER, isFallback: true }))) {
      expect(g.met).toBeNull();
      expect(g.note).toMatch(/software adapter/);
    }
  });
});
