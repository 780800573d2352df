/**
 * The browser half of `npm run bench:hash`: the same state hash timed in Chromium's V8, where the tabs
 * compute it, beside the old 64-bit hash and WebCrypto's native SHA-256 (`crypto.subtle.digest`: async,
 * so not what the tabs' synchronous per-step hash can use, but the native reference). Served by a Vite
 * dev server on 127.0.0.1 (a secure context, so `crypto.subtle` exists); bench/hash.ts drives
 * `window.hashBench`.
 */
import { hashParams } from '../../coordinator/core/hash';
import { CNN_SPEC, MLP_SPEC, parameterLayout } from '../../coordinator/core/model-spec';
import { createModel } from '../../kernels/model';
import { createGpu } from '../../kernels/runtime';
import { ImageBatches } from '../../web/worker/batches';
import { ElasticSteps } from '../../web/worker/elastic-steps';
import { legacyHash64 } from '../legacy-hash64';
import {
  BENCH_METHODS,
  medianMs,
  paramsOf,
  STEP_VARIANTS,
  type HashBenchRow,
  type HashMethod,
  type StepBenchRow,
  type StepVariant,
} from './hash-bench-api';

async function webCryptoSha256(a: Float32Array): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', a as Float32Array<ArrayBuffer>);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}

const methods: Record<HashMethod, (a: Float32Array) => string | Promise<string>> = {
  ours: hashParams,
  old64: legacyHash64,
  native: webCryptoSha256,
};

async function run(sizesMb: number[], reps: number): Promise<HashBenchRow[]> {
  const rows: HashBenchRow[] = [];
  for (const mb of sizesMb) {
    const params = paramsOf((mb * 2 ** 20) / 4);
    const native = await webCryptoSha256(params);
    if (hashParams(params) !== native) throw new Error(`ours differs from WebCrypto SHA-256 at ${mb} MB`);
    const times: Record<HashMethod, number[]> = { ours: [], old64: [], native: [] };
    for (const m of BENCH_METHODS) await methods[m](params); // warm-up (JIT)
    for (let r = 0; r < reps; r++) {
      for (let k = 0; k < BENCH_METHODS.length; k++) {
        const m = BENCH_METHODS[(r + k) % BENCH_METHODS.length];
        const t0 = performance.now();
        await methods[m](params);
        times[m].push(performance.now() - t0);
      }
    }
    rows.push({ mb, ms: medianMs(times) });
  }
  return rows;
}

async function device(): Promise<GPUDevice> {
  const adapter = await navigator.gpu?.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) throw new Error('no WebGPU adapter');
  // The limits the training worker asks for (web/worker/training-worker.ts).
  const dev = await adapter.requestDevice({
    requiredLimits: {
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxBufferSize: adapter.limits.maxBufferSize,
      maxStorageBuffersPerShaderStage: adapter.limits.maxStorageBuffersPerShaderStage,
    },
  });
  dev.addEventListener('uncapturederror', (e) =>
    console.error(`WebGPU error: ${(e as GPUUncapturedErrorEvent).error.message}`),
  );
  return dev;
}

/**
 * Training steps of a world of one through the worker's own pipeline (`ElasticSteps.applyAndHash`: apply,
 * copy the parameters for the hash, record the next step's gradients, hash while the GPU computes them),
 * with no hash (`hash: false`, no read-back), the old 64-bit hash, and ours. Blocks of `stepsPerBlock`
 * steps per variant, the variants' order rotated each round; the figure is the median ms per step.
 */
async function steps(
  model: 'mlp' | 'cnn',
  batch: number,
  stepsPerBlock: number,
  rounds: number,
): Promise<StepBenchRow> {
  const spec = model === 'mlp' ? MLP_SPEC : CNN_SPEC;
  const layout = parameterLayout(spec);
  const gpu = createGpu(await device());
  const m = createModel(gpu, spec, layout, {
    maxBatch: batch,
    optimizer: { kind: 'adamw', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 },
  });
  const count = batch * 4;
  const images = Uint8Array.from({ length: count * 784 }, (_, i) => (i * 2654435761) >>> 24);
  const labels = Uint8Array.from({ length: count }, (_, i) => i % 10);
  const batches = new ImageBatches({ images, labels, count, rows: 28, cols: 28 }, batch);
  const hashes: Record<StepVariant, (p: Float32Array) => string> = {
    none: hashParams, // not called: these steps pass hash: false
    old64: legacyHash64,
    ours: hashParams,
  };
  const runners = Object.fromEntries(
    STEP_VARIANTS.map((v) => [
      v,
      new ElasticSteps(
        m,
        () => batches,
        hashes[v],
        () => undefined,
      ),
    ]),
  ) as Record<StepVariant, ElasticSteps>;
  const indicesOf = (i: number) => Uint32Array.from({ length: batch }, (_, k) => (i * batch + k) % count);
  const block = async (v: StepVariant): Promise<number> => {
    const runner = runners[v];
    runner.stateChanged();
    await runner.computeGradients(indicesOf(0), true);
    const t0 = performance.now();
    for (let i = 0; i < stepsPerBlock; i++) {
      const next = i + 1 < stepsPerBlock ? { indices: indicesOf(i + 1), keepOnDevice: true } : null;
      const r = await runner.applyAndHash(null, batch, next, { prefetched: indicesOf(i), hash: v !== 'none' });
      if (v !== 'none' && r.hash.length !== (v === 'ours' ? 64 : 16)) throw new Error(`${v}: hash ${r.hash}`);
    }
    await gpu.device.queue.onSubmittedWorkDone();
    return (performance.now() - t0) / stepsPerBlock;
  };
  for (const v of STEP_VARIANTS) await block(v); // warm-up: pipelines compiled, JIT
  const times: Record<StepVariant, number[]> = { none: [], old64: [], ours: [] };
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < STEP_VARIANTS.length; k++) {
      const v = STEP_VARIANTS[(r + k) % STEP_VARIANTS.length];
      times[v].push(await block(v));
    }
  }
  for (const v of STEP_VARIANTS) runners[v].destroy();
  m.destroy();
  gpu.device.destroy();
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  return {
    model,
    paramBytes: layout.totalElements * 4,
    batch,
    msPerStep: { none: median(times.none), old64: median(times.old64), ours: median(times.ours) },
  };
}

declare global {
  interface Window {
    hashBench?: { run: typeof run; steps: typeof steps; old64Vector(): string };
  }
}
window.hashBench = { run, steps, old64Vector: () => legacyHash64(paramsOf(1000)) };
