/**
 * The browser half of `npm run bench:hash`: the same state hash timed in Chromium's V8, where the tabs
 * compute it, beside the old 64-bit hash and WebCrypto's native SHA-256 (`crypto.subtle.digest`: async,
 * so not what the tabs' synchronous per-step hash can use, but the native reference). Served by a Vite
 * dev server on 127.0.0.1 (a secure context, so `crypto.subtle` exists); bench/hash.ts drives
 * `window.hashBench`.
 */
import { hashParams } from '../../coordinator/core/hash';
import { legacyHash64 } from '../legacy-hash64';
import { BENCH_METHODS, medianMs, paramsOf, type HashBenchRow, type HashMethod } from './hash-bench-api';

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

declare global {
  interface Window {
    hashBench?: { run: typeof run; old64Vector(): string };
  }
}
window.hashBench = { run, old64Vector: () => legacyHash64(paramsOf(1000)) };
