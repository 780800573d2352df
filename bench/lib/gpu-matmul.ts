/**
 * bench:gpu's kernel-level parts: a measured float32 peak (fma-peak.wgsl) and the GFLOP/s of every
 * matmul variant the autotuner may choose (kernels/tuning/variants.ts), in float32 and with packed-half
 * operands (the f16 mode), on square products. Each variant's product is checked against float64 dot
 * products at sampled entries before it is timed. Timing: a sample is `runs` products in one submission
 * until the queue is idle (no read-back); figures are medians.
 */
import fmaCode from './fma-peak.wgsl?raw';
import { toHalf } from '../../kernels/ops/half';
import { matmul, matmulTileName, type MatmulTile } from '../../kernels/ops/matmul';
import {
  computePipeline,
  createTensor,
  createUniformBuffer,
  bindBuffers,
  readTensor,
  recordCalls,
  submitCalls,
  writeUniforms,
  f32bits,
  type Gpu,
  type KernelCall,
  type Tensor,
} from '../../kernels/runtime';
import { candidates } from '../../kernels/tuning/variants';
import { median } from './topology-figures';

export interface MatmulVariantRow {
  name: string;
  precision: 'f32' | 'f16';
  /** GFLOP/s per size (null: not run at that size). */
  gflops: (number | null)[];
}

export interface MatmulResults {
  sizes: number[];
  rows: MatmulVariantRow[];
}

/** Milliseconds of one pass of `calls`: `runs` passes per submission, the median of `reps` samples. */
async function timeRuns(gpu: Gpu, calls: readonly KernelCall[], runs: number, reps: number): Promise<number> {
  const samples: number[] = [];
  for (let r = 0; r < reps; r++) {
    const encoder = gpu.device.createCommandEncoder({ label: 'bench.gpu' });
    for (let i = 0; i < runs; i++) recordCalls(encoder, calls, 'bench.gpu');
    const t0 = performance.now();
    gpu.device.queue.submit([encoder.finish()]);
    await gpu.device.queue.onSubmittedWorkDone();
    samples.push((performance.now() - t0) / runs);
  }
  return median(samples);
}

/** How many passes make a sample last about `targetMs`, from one timed pass (after a warm-up). */
async function runsFor(gpu: Gpu, calls: readonly KernelCall[], targetMs: number): Promise<number> {
  await timeRuns(gpu, calls, 1, 1);
  const once = await timeRuns(gpu, calls, 1, 1);
  return Math.max(1, Math.min(1000, Math.round(targetMs / Math.max(once, 0.01))));
}

/**
 * The float32 FMA peak in GFLOP/s: the dispatch grows (workgroups, then iterations) until one lasts at
 * least `targetMs`, so the adapter is full and launch overhead is noise; then the median of 5.
 */
export async function measurePeak(gpu: Gpu, targetMs = 200): Promise<{ gflops: number; invocations: number }> {
  const out = createTensor(gpu, [65535 * 256], 'fma.out');
  const uniforms = createUniformBuffer(gpu, 8, 'fma.params');
  writeUniforms(gpu, uniforms, [0.9999, 0.9998, 0.9997, 0.9996, 1e-4, 2e-4, 3e-4, 4e-4].map(f32bits));
  let groups = 16;
  let iters = 256;
  for (;;) {
    const pipeline = computePipeline(gpu, fmaCode, 'fma-peak', 'fma_peak', { ITERS: iters });
    const call: KernelCall = {
      label: 'fma-peak',
      pipeline,
      bindGroup: bindBuffers(gpu, pipeline, [uniforms, out], 'fma-peak'),
      workgroups: [groups, 1, 1],
    };
    const ms = await timeRuns(gpu, [call], 1, 1);
    const grow = ms < targetMs && (groups < 65535 || iters < 65536);
    if (grow) {
      const factor = Math.min(16, Math.max(2, Math.ceil(targetMs / Math.max(ms, 0.01))));
      if (groups < 65535) groups = Math.min(65535, groups * factor);
      else iters *= factor;
      continue;
    }
    const median5 = await timeRuns(gpu, [call], 1, 5);
    const invocations = groups * 256;
    out.buffer.destroy();
    return { gflops: (invocations * iters * 8 * 4 * 2) / (median5 * 1e6), invocations };
  }
}

interface Operands {
  a: Float32Array;
  b: Float32Array;
  /** float32 tensors, and their packed halves. */
  tensors: { a: Tensor; b: Tensor; a16: Tensor; b16: Tensor; out: Tensor };
}

async function operands(gpu: Gpu, n: number): Promise<Operands> {
  let state = 12345;
  const next = () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state / 4294967296 - 0.5;
  };
  const a = Float32Array.from({ length: n * n }, next);
  const b = Float32Array.from({ length: n * n }, next);
  const ta = createTensor(gpu, [n, n], 'a', a);
  const tb = createTensor(gpu, [n, n], 'b', b);
  const a16 = createTensor(gpu, [(n * n) / 2], 'a16');
  const b16 = createTensor(gpu, [(n * n) / 2], 'b16');
  const casts = [
    toHalf(gpu, { x: ta, packed: a16 }, { size: n * n }),
    toHalf(gpu, { x: tb, packed: b16 }, { size: n * n }),
  ];
  submitCalls(
    gpu,
    casts.map((k) => k.call),
  );
  await gpu.device.queue.onSubmittedWorkDone();
  return { a, b, tensors: { a: ta, b: tb, a16, b16, out: createTensor(gpu, [n, n], 'out') } };
}

/** Compare sampled entries of the product with float64 dot products (of halves: within half rounding). */
async function check(gpu: Gpu, o: Operands, n: number, half: boolean, name: string): Promise<void> {
  const got = await readTensor(gpu, o.tensors.out);
  const tol = half ? 2e-2 : 1e-4;
  for (let s = 0; s < 16; s++) {
    const i = (s * 7919) % n;
    const j = (s * 104729 + 13) % n;
    let ref = 0;
    let mass = 0;
    for (let k = 0; k < n; k++) {
      ref += o.a[i * n + k] * o.b[k * n + j];
      mass += Math.abs(o.a[i * n + k] * o.b[k * n + j]);
    }
    if (!(Math.abs(got[i * n + j] - ref) <= tol * mass))
      throw new Error(`matmul ${name} n=${n}: [${i},${j}] = ${got[i * n + j]}, float64 ${ref}`);
  }
}

/**
 * GFLOP/s of every candidate tile, f32 and f16, at each size. A variant below `keep` × the best of its
 * precision at one size is not run at the larger ones (null), which saves minutes on a slow adapter.
 */
export async function benchMatmul(
  gpu: Gpu,
  opts: { sizes: number[]; reps: number; sampleMs: number; keep: number; log: (line: string) => void },
): Promise<MatmulResults> {
  const tiles = candidates(gpu, 'matmul') as MatmulTile[];
  const variants = (['f32', 'f16'] as const).flatMap((precision) => tiles.map((tile) => ({ tile, precision })));
  const rows: MatmulVariantRow[] = variants.map((v) => ({
    name: matmulTileName(v.tile),
    precision: v.precision,
    gflops: [],
  }));
  let alive = variants.map(() => true);
  for (const n of opts.sizes) {
    const o = await operands(gpu, n);
    for (let v = 0; v < variants.length; v++) {
      if (!alive[v]) {
        rows[v].gflops.push(null);
        continue;
      }
      const { tile, precision } = variants[v];
      const half = precision === 'f16';
      const t = o.tensors;
      const kernel = matmul(
        gpu,
        { a: half ? t.a16 : t.a, b: half ? t.b16 : t.b, out: t.out },
        { m: n, n, k: n },
        { tile, halfA: half, halfB: half },
      );
      const runs = await runsFor(gpu, [kernel.call], opts.sampleMs);
      await check(gpu, o, n, half, rows[v].name);
      const ms = await timeRuns(gpu, [kernel.call], runs, opts.reps);
      rows[v].gflops.push((2 * n ** 3) / (ms * 1e6));
      opts.log(`matmul n=${n} ${precision} ${rows[v].name}: ${rows[v].gflops.at(-1)!.toFixed(2)} GFLOP/s`);
    }
    for (const t of Object.values(o.tensors)) t.buffer.destroy();
    alive = alive.map((on, v) => {
      const g = rows[v].gflops.at(-1);
      const best = Math.max(...rows.filter((r) => r.precision === rows[v].precision).map((r) => r.gflops.at(-1) ?? 0));
      return on && g !== null && g !== undefined && g >= opts.keep * best;
    });
  }
  return { sizes: opts.sizes, rows };
}
