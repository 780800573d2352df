/** What bench/hash.ts (Node) and bench/pages/hash-page.ts (Chromium) share: inputs, methods, medians. */

/**
 * `ours`: hashParams on the CPU (the tree of SHA-256, pure JS); `wasm`: the same tree with SHA-256 in
 * WebAssembly (web/worker/params-hasher.ts `wasmSha256`, what a tab on a software adapter uses);
 * `old64`: MurmurHash3+XXH32; `native`: node:crypto or WebCrypto SHA-256 of the whole buffer (the
 * reference for SHA-256's own speed).
 */
export type HashMethod = 'ours' | 'wasm' | 'old64' | 'native';
export const BENCH_METHODS: readonly HashMethod[] = ['ours', 'wasm', 'old64', 'native'];

export interface HashBenchRow {
  mb: number;
  /** Median milliseconds per hash of `mb` MB, per method. */
  ms: Record<HashMethod, number>;
  /**
   * Chromium only, the same bytes in a GPU buffer: `gpu`, the tree hash on the GPU (kernels/ops/sha256.wgsl,
   * the digests read back, the root in JS: what a tab does per step); `readback`, a read-back of the
   * buffer then `ours` on it (what a tab did per step before the hash moved to the GPU). Median ms.
   */
  gpuMs?: { gpu: number; readback: number };
}

/** Deterministic float32 "parameters" (exactly representable values, no Math.sin). */
export function paramsOf(floats: number): Float32Array {
  return Float32Array.from({ length: floats }, (_, i) => ((i * 37) % 97) / 64 - 0.75);
}

/** Median of each method's times (ms, 3 decimals). */
export function medianMs(times: Record<HashMethod, number[]>): Record<HashMethod, number> {
  return Object.fromEntries(BENCH_METHODS.map((m) => [m, Number(median(times[m]).toFixed(3))])) as Record<
    HashMethod,
    number
  >;
}

export function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** An empty list of times per key (per hash method or per step variant). */
export function timesFor<K extends string>(keys: readonly K[]): Record<K, number[]> {
  return Object.fromEntries(keys.map((k) => [k, [] as number[]])) as Record<K, number[]>;
}

/**
 * Training-step variants: no hash (no read-back); the parameters read back and hashed by the old 64-bit
 * hash (`old64`), by the tree hash in pure JS (`readback`: what the worker did on CPU-backed adapters,
 * and everywhere before issue 9) or by the tree hash with SHA-256 in WebAssembly (`wasm`: what the
 * worker does on CPU-backed adapters now); `gpu`: the tree hash's chunks on the GPU, only the digests
 * read back (what the worker does on a real GPU).
 */
export type StepVariant = 'none' | 'old64' | 'readback' | 'wasm' | 'gpu';
export const STEP_VARIANTS: readonly StepVariant[] = ['none', 'old64', 'readback', 'wasm', 'gpu'];

export interface StepBenchRow {
  model: 'mlp' | 'cnn';
  /** Bytes of parameters hashed per step. */
  paramBytes: number;
  batch: number;
  /** Median wall milliseconds per step (world of one, the worker's pipeline), per variant. */
  msPerStep: Record<StepVariant, number>;
}
