/**
 * The cost of the cryptographic state hash: `npm run bench:hash -- [--sizes-mb 1,4] [--reps 15] [--no-browser]
 * [--step-models mlp,cnn] [--step-batch 128] [--step-block 10] [--step-rounds 5]`.
 *
 * Hashes float32 parameter buffers of each size four ways on the CPU, side by side in one run:
 * - `ours`: `hashParams` of core/state/hash.ts, the tree of SHA-256 (4 KiB chunks, then the root)
 *   in pure JS (`@noble/hashes`), what a tab computes where the parameters are in memory anyway;
 * - `wasm`: the same tree with SHA-256 in WebAssembly (`hash-wasm`), what a tab's worker on a software
 *   adapter computes per step after a read-back;
 * - `old64`: the 64-bit MurmurHash3 + XXH32 pair it replaced (bench/lib/legacy-hash64.ts): the speed given up;
 * - `native`: the reference for SHA-256 itself, native code — in Node `createHash('sha256')` (OpenSSL),
 *   in Chromium `crypto.subtle.digest` (async: the tabs hash synchronously where the parameters are mapped).
 * Both in this Node process and in one headless Chromium page (bench/pages/hash-page.ts, where the tabs
 * run it; main thread, the same V8 as a worker). In Chromium, also the tree hash on WebGPU (`gpu`:
 * kernels/ops/sha256.wgsl over the buffer, the digests read back, the root in JS, what a tab's worker does per
 * step) beside `readback` (the buffer read back and hashed by `ours`, what it did before). Before timing,
 * `ours` must equal the tree built with node:crypto (test/support/tree-hash-reference.ts; in Chromium,
 * with WebCrypto per chunk), `stateHash(params, outer)` too, `gpu` and `readback` must equal `ours`, and
 * `old64` must reproduce the vector its unit test pinned. Repetitions rotate the order so none always
 * runs first; figures are medians in ms and MB/s (1 MB = 2^20 bytes).
 *
 * Then what it costs a training step: in the same Chromium page, a world of one trains `mlp` on WebGPU
 * (SwiftShader) through the worker's own pipeline (`ElasticSteps.applyAndHash`: the hash is finished while
 * the GPU computes the next step) with no hash (no read-back), the parameters read back and hashed by
 * the old hash or by the tree hash in JS, and the tree hash on the GPU, in rotating blocks.
 * Prints the tables and one JSON line `{"bench":"hash", ...}`.
 */
import { createHash } from 'node:crypto';
import { loadavg } from 'node:os';
import { resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { hashParams, stateHash } from '../core/state/hash';
import { launchChromium, watchPage } from '../test/support/browser';
import { treeHashReference } from '../test/support/tree-hash-reference';
import { REPO_ROOT, startViteServer } from '../test/support/vite-server';
import { chromiumVersion } from './lib/common';
import { wasmSha256 } from '../web/worker/params-hasher';
import { legacyHash64 } from './lib/legacy-hash64';
import {
  BENCH_METHODS,
  medianMs,
  paramsOf,
  STEP_VARIANTS,
  timesFor,
  type HashBenchRow,
  type HashMethod,
  type StepBenchRow,
} from './pages/hash-bench-api';

const { values: flags } = parseArgs({
  options: {
    'sizes-mb': { type: 'string', default: '1,4' },
    reps: { type: 'string', default: '15' },
    'no-browser': { type: 'boolean', default: false },
    /** Training steps per block and rounds of the per-step section (Chromium only). */
    'step-block': { type: 'string', default: '10' },
    'step-rounds': { type: 'string', default: '5' },
    'step-batch': { type: 'string', default: '128' },
    /** mlp, cnn: the cnn's step takes ~1.8 s on SwiftShader, so it is not in the default run. */
    'step-models': { type: 'string', default: 'mlp' },
  },
});
const SIZES_MB = flags['sizes-mb'].split(',').map(Number);
const REPS = Number(flags.reps);
if (SIZES_MB.some((s) => !(s > 0 && Number.isInteger((s * 2 ** 20) / 4))) || !(REPS >= 1 && REPS <= 1000)) {
  throw new Error('bench:hash: --sizes-mb must be positive sizes of whole float32 arrays, --reps 1..1000');
}
const STEP_BLOCK = Number(flags['step-block']);
const STEP_ROUNDS = Number(flags['step-rounds']);
const STEP_BATCH = Number(flags['step-batch']);
const STEP_MODELS = flags['step-models'].split(',').filter(Boolean);
if (!STEP_MODELS.every((m): m is 'mlp' | 'cnn' => m === 'mlp' || m === 'cnn')) {
  throw new Error('bench:hash: --step-models is a list of mlp, cnn');
}
if (![STEP_BLOCK, STEP_ROUNDS, STEP_BATCH].every((n) => Number.isInteger(n) && n >= 1 && n <= 1024)) {
  throw new Error('bench:hash: --step-block, --step-rounds and --step-batch must be integers 1..1024');
}
/** The vector the old hash's unit test pinned for `paramsOf(1000)` before it was retired. */
const OLD64_VECTOR = 'e8a3733966af47a0';

const nodeSha256 = (...arrays: Float32Array[]) => {
  const h = createHash('sha256');
  for (const a of arrays) h.update(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
  return h.digest('hex');
};
const wasm = await wasmSha256();
if (!wasm) throw new Error('bench:hash: no WebAssembly');
const nodeMethods: Record<HashMethod, (a: Float32Array) => string> = {
  ours: hashParams,
  wasm: (a) => hashParams(a, wasm),
  old64: legacyHash64,
  native: nodeSha256,
};

function checkNode(): void {
  if (legacyHash64(paramsOf(1000)) !== OLD64_VECTOR) throw new Error('bench:hash: the old64 baseline is wrong');
  for (const mb of SIZES_MB) {
    const p = paramsOf((mb * 2 ** 20) / 4);
    if (hashParams(p) !== treeHashReference(p))
      throw new Error(`bench:hash: ours differs from the node:crypto tree at ${mb} MB`);
    if (nodeMethods.wasm(p) !== treeHashReference(p))
      throw new Error(`bench:hash: wasm differs from the node:crypto tree at ${mb} MB`);
    const outer = p.map((x) => -x);
    if (stateHash(p, outer) !== treeHashReference(p, outer))
      throw new Error(`bench:hash: stateHash(params, outer) differs from node:crypto at ${mb} MB`);
  }
}

function measureNode(mb: number): HashBenchRow {
  const params = paramsOf((mb * 2 ** 20) / 4);
  const times = timesFor(BENCH_METHODS);
  for (const m of BENCH_METHODS) nodeMethods[m](params); // warm-up (JIT)
  for (let r = 0; r < REPS; r++) {
    for (let k = 0; k < BENCH_METHODS.length; k++) {
      const m = BENCH_METHODS[(r + k) % BENCH_METHODS.length];
      const t0 = performance.now();
      nodeMethods[m](params);
      times[m].push(performance.now() - t0);
    }
  }
  return { mb, ms: medianMs(times) };
}

interface ChromiumResults {
  rows: HashBenchRow[];
  steps: StepBenchRow[];
  adapter: string;
  workerHashesOn: 'gpu' | 'cpu';
}

async function measureChromium(): Promise<ChromiumResults> {
  const vite = await startViteServer({
    cacheDir: resolve(REPO_ROOT, 'node_modules/.vite-bench-hash'),
    optimizeDeps: ['@noble/hashes/sha2.js', '@noble/hashes/utils.js', 'hash-wasm', 'zod'],
  });
  const browser = await launchChromium();
  try {
    const page = await browser.newPage();
    const problems = watchPage(page);
    await page.goto(`${vite.url}/bench/pages/hash.html`);
    await page.waitForFunction(() => window.hashBench !== undefined, null, { timeout: 60_000 });
    const vector = await page.evaluate(() => window.hashBench!.old64Vector());
    if (vector !== OLD64_VECTOR) throw new Error(`bench:hash: old64 in Chromium gives ${vector}`);
    const choice = await page.evaluate(() => window.hashBench!.adapterChoice());
    const rows = await page.evaluate(([sizes, reps]) => window.hashBench!.run(sizes, reps), [SIZES_MB, REPS] as const);
    const steps: StepBenchRow[] = [];
    for (const model of STEP_MODELS as ('mlp' | 'cnn')[]) {
      steps.push(
        await page.evaluate(([m, b, n, r]) => window.hashBench!.steps(m, b, n, r), [
          model,
          STEP_BATCH,
          STEP_BLOCK,
          STEP_ROUNDS,
        ] as const),
      );
    }
    problems.assertNone();
    return { rows, steps, ...choice };
  } finally {
    await browser.close();
    await vite.close();
  }
}

const mbPerS = (mb: number, ms: number) => Number((mb / (ms / 1000)).toFixed(1));
const pad = (s: string | number, n: number) => String(s).padStart(n);

function printTable(title: string, rows: readonly HashBenchRow[], nativeName: string): void {
  console.log(title);
  const gpu = rows.some((r) => r.gpuMs);
  console.log(
    `${pad('MB', 4)} ${pad('ours ms', 9)} ${pad('wasm ms', 9)} ${pad('old64 ms', 9)} ${pad(`${nativeName} ms`, 10)} ${pad('ours MB/s', 10)} ${pad('old64 MB/s', 11)} ${pad(`${nativeName} MB/s`, 11)} ${pad('ours/old64', 11)} ${pad(`ours/${nativeName}`, 12)}` +
      (gpu ? ` ${pad('gpu ms', 8)} ${pad('readback ms', 12)} ${pad('gpu MB/s', 9)} ${pad('gpu/readback', 13)}` : ''),
  );
  for (const r of rows) {
    const g = r.gpuMs;
    console.log(
      `${pad(r.mb, 4)} ${pad(r.ms.ours.toFixed(2), 9)} ${pad(r.ms.wasm.toFixed(2), 9)} ${pad(r.ms.old64.toFixed(2), 9)} ${pad(r.ms.native.toFixed(2), 10)} ${pad(mbPerS(r.mb, r.ms.ours), 10)} ${pad(mbPerS(r.mb, r.ms.old64), 11)} ${pad(mbPerS(r.mb, r.ms.native), 11)} ${pad((r.ms.ours / r.ms.old64).toFixed(2), 11)} ${pad((r.ms.ours / r.ms.native).toFixed(2), 12)}` +
        (g
          ? ` ${pad(g.gpu.toFixed(2), 8)} ${pad(g.readback.toFixed(2), 12)} ${pad(mbPerS(r.mb, g.gpu), 9)} ${pad((g.gpu / g.readback).toFixed(2), 13)}`
          : ''),
    );
  }
}

function printSteps(rows: readonly StepBenchRow[]): void {
  console.log(
    `training steps in Chromium (SwiftShader), world of one through ElasticSteps.applyAndHash, median ms/step of ${STEP_ROUNDS} blocks of ${STEP_BLOCK}`,
  );
  console.log(
    `${pad('model', 6)} ${pad('MB', 6)} ${pad('batch', 6)} ${pad('no hash', 9)} ${pad('old64', 9)} ${pad('readback', 9)} ${pad('wasm', 9)} ${pad('gpu', 9)} ${pad('gpu-none', 10)} ${pad('readback-none', 14)} ${pad('wasm-none', 10)} ${pad('gpu/readback', 14)}`,
  );
  for (const r of rows) {
    const s = r.msPerStep;
    console.log(
      `${pad(r.model, 6)} ${pad((r.paramBytes / 2 ** 20).toFixed(2), 6)} ${pad(r.batch, 6)} ${pad(s.none.toFixed(1), 9)} ${pad(s.old64.toFixed(1), 9)} ${pad(s.readback.toFixed(1), 9)} ${pad(s.wasm.toFixed(1), 9)} ${pad(s.gpu.toFixed(1), 9)} ${pad((s.gpu - s.none).toFixed(1), 10)} ${pad((s.readback - s.none).toFixed(1), 14)} ${pad((s.wasm - s.none).toFixed(1), 10)} ${pad((s.gpu / s.readback).toFixed(2), 14)}`,
    );
  }
}

const stepJson = (r: StepBenchRow) => ({
  model: r.model,
  paramBytes: r.paramBytes,
  batch: r.batch,
  msPerStep: Object.fromEntries(STEP_VARIANTS.map((v) => [v, Number(r.msPerStep[v].toFixed(2))])),
  wasmOverReadback: Number((r.msPerStep.wasm / r.msPerStep.readback).toFixed(3)),
  gpuOverReadback: Number((r.msPerStep.gpu / r.msPerStep.readback).toFixed(3)),
  readbackOverOld64: Number((r.msPerStep.readback / r.msPerStep.old64).toFixed(3)),
});

const jsonRows = (rows: readonly HashBenchRow[]) =>
  rows.map((r) => ({
    mb: r.mb,
    ms: r.ms,
    mbPerS: {
      ours: mbPerS(r.mb, r.ms.ours),
      wasm: mbPerS(r.mb, r.ms.wasm),
      old64: mbPerS(r.mb, r.ms.old64),
      native: mbPerS(r.mb, r.ms.native),
    },
    oursOverOld64: Number((r.ms.ours / r.ms.old64).toFixed(2)),
    oursOverNative: Number((r.ms.ours / r.ms.native).toFixed(2)),
    wasmOverOurs: Number((r.ms.wasm / r.ms.ours).toFixed(2)),
    ...(r.gpuMs
      ? {
          gpuMs: r.gpuMs,
          gpuMbPerS: mbPerS(r.mb, r.gpuMs.gpu),
          gpuOverReadback: Number((r.gpuMs.gpu / r.gpuMs.readback).toFixed(2)),
        }
      : {}),
  }));

async function main(): Promise<void> {
  const loadStart = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  checkNode();
  const node = SIZES_MB.map(measureNode);
  const chromium = flags['no-browser'] ? null : await measureChromium();
  const loadEnd = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

  printTable(`Node ${process.version}, median of ${REPS} per method (order rotated each repetition)`, node, 'node');
  if (chromium) {
    console.log();
    printTable(`${chromiumVersion()} headless (page main thread), median of ${REPS}`, chromium.rows, 'subtle');
    console.log();
    printSteps(chromium.steps);
    console.log(
      `adapter ${chromium.adapter}: the training worker hashes on the ${chromium.workerHashesOn.toUpperCase()} here (web/worker/params-hasher.ts)`,
    );
  }
  console.log(
    "ours = hashParams (tree of SHA-256 over 4 KiB chunks, @noble/hashes, pure JS); wasm = the same tree with hash-wasm's SHA-256 (what a tab on a software adapter uses); old64 = MurmurHash3+XXH32 (replaced); node/subtle = node:crypto/WebCrypto plain SHA-256 of the whole buffer; gpu = the tree hash on WebGPU (SwiftShader here: the same CPU) with the digests read back; readback = the buffer read back, then ours",
  );
  console.log(`load average ${loadStart} at start, ${loadEnd} at end`);
  console.log(
    JSON.stringify({
      bench: 'hash',
      node: process.version,
      chromium: chromium ? chromiumVersion() : null,
      reps: REPS,
      nodeSizes: jsonRows(node),
      chromiumSizes: chromium ? jsonRows(chromium.rows) : null,
      chromiumSteps: chromium ? chromium.steps.map(stepJson) : null,
      adapter: chromium?.adapter ?? null,
      workerHashesOn: chromium?.workerHashesOn ?? null,
      loadAverage: { start: loadStart, end: loadEnd },
    }),
  );
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exitCode = 1;
});
