/**
 * The browser half of `npm run bench:hash`: the same state hash timed in Chromium's V8, where the tabs
 * compute it, beside the old 64-bit hash and WebCrypto's native SHA-256 (`crypto.subtle.digest`: async,
 * so not what the tabs' synchronous per-step hash can use, but the native reference); then the tree hash
 * on WebGPU (kernels/ops/sha256.wgsl) against a read-back and the JS hash of the same buffer. Served by a Vite
 * dev server on 127.0.0.1 (a secure context, so `crypto.subtle` exists); bench/hash.ts drives
 * `window.hashBench`.
 */
import {
  chunkDigestBytes,
  HASH_CHUNK_BYTES,
  hashParams,
  paramsHasher,
  type Sha256Factory,
  stateHashOfDigests,
  treeRoot,
  trainingStateHash,
} from '../../core/state/hash';
import { CNN_SPEC, MLP_SPEC, parameterLayout } from '../../core/training/model-spec';
import { createModel } from '../../kernels/model/model';
import { createGpu, createTensor, recordCalls, StagingReader, type Gpu } from '../../kernels/runtime';
import { chunkCount, chunkSha256 } from '../../kernels/ops/sha256';
import { hashModelParams, type ParamsHasher } from '../../kernels/model/training-state';
import { ImageBatches } from '../../web/worker/data/batches';
import { ElasticSteps } from '../../web/worker/elastic-steps';
import { cpuBackedAdapter, wasmSha256 } from '../../web/worker/params-hasher';
import { legacyHash64 } from '../lib/legacy-hash64';
import {
  BENCH_METHODS,
  median,
  medianMs,
  paramsOf,
  STEP_VARIANTS,
  timesFor,
  type HashBenchRow,
  type HashMethod,
  type StepBenchRow,
  type StepVariant,
} from './hash-bench-api';

async function webCryptoSha256(a: Float32Array): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', a as Float32Array<ArrayBuffer>);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}

const wasmOrNull = await wasmSha256();
if (!wasmOrNull) throw new Error('bench:hash: no WebAssembly in this page');
const wasm: Sha256Factory = wasmOrNull;

const methods: Record<HashMethod, (a: Float32Array) => string | Promise<string>> = {
  ours: hashParams,
  wasm: (a) => hashParams(a, wasm),
  old64: legacyHash64,
  native: webCryptoSha256,
};

/** The tree hash built from WebCrypto's SHA-256 of each chunk: the native check of `hashParams`. */
async function webCryptoTree(a: Float32Array): Promise<string> {
  const bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const digests = new Uint8Array(chunkDigestBytes(bytes.length));
  for (let at = 0; at < bytes.length; at += HASH_CHUNK_BYTES) {
    const chunk = bytes.slice(at, at + HASH_CHUNK_BYTES);
    digests.set(new Uint8Array(await crypto.subtle.digest('SHA-256', chunk)), (at / HASH_CHUNK_BYTES) * 32);
  }
  return treeRoot([{ byteLength: bytes.length, digests }]);
}

/**
 * The same bytes on the GPU: per repetition, the tree hash there (dispatch, digests read back, root in
 * JS) and a read-back of the whole buffer hashed in JS, in rotating order; median ms of each.
 */
async function gpuRow(gpu: Gpu, params: Float32Array, reps: number): Promise<{ gpu: number; readback: number }> {
  const byteLength = params.byteLength;
  const data = createTensor(gpu, [params.length], 'bench.params', params);
  const dims = { byteLength, chunkBytes: HASH_CHUNK_BYTES };
  const digests = createTensor(gpu, [chunkCount(dims) * 8], 'bench.digests');
  const kernel = chunkSha256(gpu, { data, digests }, dims);
  const reader = new StagingReader(gpu, 'bench.read');
  const variants = {
    gpu: () =>
      reader.use(
        digests.buffer,
        0,
        chunkCount(dims) * 32,
        (m) => stateHashOfDigests(byteLength, new Uint8Array(m)),
        (encoder) => recordCalls(encoder, [kernel.call], 'bench.sha256'),
      ),
    readback: () => reader.use(data.buffer, 0, byteLength, (m) => hashParams(new Float32Array(m))),
  };
  const want = hashParams(params);
  for (const v of ['gpu', 'readback'] as const) {
    const got = await variants[v]();
    if (got !== want) throw new Error(`${v} tree hash ${got} differs from hashParams ${want}`);
  }
  const times = { gpu: [] as number[], readback: [] as number[] };
  for (let r = 0; r < reps; r++) {
    for (const v of r % 2 ? (['readback', 'gpu'] as const) : (['gpu', 'readback'] as const)) {
      const t0 = performance.now();
      await variants[v]();
      times[v].push(performance.now() - t0);
    }
  }
  reader.destroy();
  data.buffer.destroy();
  digests.buffer.destroy();
  const ms = (xs: number[]) => Number(median(xs).toFixed(3));
  return { gpu: ms(times.gpu), readback: ms(times.readback) };
}

async function run(sizesMb: number[], reps: number): Promise<HashBenchRow[]> {
  const rows: HashBenchRow[] = [];
  const gpu = createGpu(await device());
  for (const mb of sizesMb) {
    const params = paramsOf((mb * 2 ** 20) / 4);
    const native = await webCryptoTree(params);
    if (hashParams(params) !== native) throw new Error(`ours differs from a WebCrypto SHA-256 tree at ${mb} MB`);
    if (methods.wasm(params) !== native) throw new Error(`wasm differs from a WebCrypto SHA-256 tree at ${mb} MB`);
    const times = timesFor(BENCH_METHODS);
    for (const m of BENCH_METHODS) await methods[m](params); // warm-up (JIT)
    for (let r = 0; r < reps; r++) {
      for (let k = 0; k < BENCH_METHODS.length; k++) {
        const m = BENCH_METHODS[(r + k) % BENCH_METHODS.length];
        const t0 = performance.now();
        await methods[m](params);
        times[m].push(performance.now() - t0);
      }
    }
    rows.push({ mb, ms: medianMs(times), gpuMs: await gpuRow(gpu, params, reps) });
  }
  gpu.device.destroy();
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
 * hash, record the next step's gradients, finish the hash while the GPU computes them), with no hash
 * (`hash: false`, no read-back), a read-back of the parameters hashed by the old 64-bit hash or by the
 * tree hash in JS or with SHA-256 in WebAssembly, and the tree hash's chunks on the GPU with only the digests read back (`gpu`). Blocks of
 * `stepsPerBlock` steps per variant, the variants' order rotated each round; the figure is the median
 * ms per step.
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
  const hashes: Record<StepVariant, ParamsHasher> = {
    none: paramsHasher, // not called: these steps pass hash: false
    // The legacy hash covers the parameters alone: its figure is the old, weaker check's cost.
    old64: { ofParams: legacyHash64, ofState: (p) => legacyHash64(p) },
    readback: { ofParams: hashParams, ofState: trainingStateHash },
    wasm: { ofParams: (p) => hashParams(p, wasm), ofState: (p, moments, t) => trainingStateHash(p, moments, t, wasm) },
    gpu: paramsHasher,
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
      if (v !== 'none' && r.hash.length !== (v === 'old64' ? 16 : 64)) throw new Error(`${v}: hash ${r.hash}`);
    }
    await gpu.device.queue.onSubmittedWorkDone();
    return (performance.now() - t0) / stepsPerBlock;
  };
  for (const v of STEP_VARIANTS) await block(v); // warm-up: pipelines compiled, JIT
  const [onGpu, readBack, inWasm] = await Promise.all([
    hashModelParams(m, paramsHasher),
    hashModelParams(m, hashes.readback),
    hashModelParams(m, hashes.wasm),
  ]);
  if (onGpu !== readBack) throw new Error(`the GPU tree hash ${onGpu} differs from the read-back one ${readBack}`);
  if (inWasm !== readBack) throw new Error(`the wasm tree hash ${inWasm} differs from the JS one ${readBack}`);
  const times = timesFor(STEP_VARIANTS);
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < STEP_VARIANTS.length; k++) {
      const v = STEP_VARIANTS[(r + k) % STEP_VARIANTS.length];
      times[v].push(await block(v));
    }
  }
  for (const v of STEP_VARIANTS) runners[v].destroy();
  m.destroy();
  gpu.device.destroy();
  return {
    model,
    paramBytes: layout.totalElements * 4,
    batch,
    msPerStep: Object.fromEntries(STEP_VARIANTS.map((v) => [v, median(times[v])])) as Record<StepVariant, number>,
  };
}

/** The adapter, and where the training worker hashes on it (web/worker/params-hasher.ts). */
async function adapterChoice(): Promise<{ adapter: string; workerHashesOn: 'gpu' | 'cpu' }> {
  const adapter = await navigator.gpu?.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) throw new Error('no WebGPU adapter');
  const info = adapter.info;
  const a = {
    vendor: info?.vendor ?? '',
    architecture: info?.architecture ?? '',
    description: info?.description ?? '',
    isFallback: info?.isFallbackAdapter ?? false,
  };
  return {
    adapter: [a.vendor, a.architecture, a.description].filter(Boolean).join(' / '),
    workerHashesOn: cpuBackedAdapter(a) ? 'cpu' : 'gpu',
  };
}

declare global {
  interface Window {
    hashBench?: {
      run: typeof run;
      steps: typeof steps;
      adapterChoice: typeof adapterChoice;
      old64Vector(): string;
    };
  }
}
window.hashBench = { run, steps, adapterChoice, old64Vector: () => legacyHash64(paramsOf(1000)) };
