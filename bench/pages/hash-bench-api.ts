/** What bench/hash.ts (Node) and bench/pages/hash-page.ts (Chromium) share: inputs, methods, medians. */

/** `ours`: hashParams (SHA-256, pure JS); `old64`: MurmurHash3+XXH32; `native`: node:crypto or WebCrypto SHA-256. */
export type HashMethod = 'ours' | 'old64' | 'native';
export const BENCH_METHODS: readonly HashMethod[] = ['ours', 'old64', 'native'];

export interface HashBenchRow {
  mb: number;
  /** Median milliseconds per hash of `mb` MB, per method. */
  ms: Record<HashMethod, number>;
}

/** Deterministic float32 "parameters" (exactly representable values, no Math.sin). */
export function paramsOf(floats: number): Float32Array {
  return Float32Array.from({ length: floats }, (_, i) => ((i * 37) % 97) / 64 - 0.75);
}

export function medianMs(times: Record<HashMethod, number[]>): Record<HashMethod, number> {
  const median = (values: number[]) => {
    const s = [...values].sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
  };
  return {
    ours: Number(median(times.ours).toFixed(3)),
    old64: Number(median(times.old64).toFixed(3)),
    native: Number(median(times.native).toFixed(3)),
  };
}

/** Training-step variants: no hash (no read-back), the old 64-bit hash, ours (SHA-256). */
export type StepVariant = 'none' | 'old64' | 'ours';
export const STEP_VARIANTS: readonly StepVariant[] = ['none', 'old64', 'ours'];

export interface StepBenchRow {
  model: 'mlp' | 'cnn';
  /** Bytes of parameters hashed per step. */
  paramBytes: number;
  batch: number;
  /** Median wall milliseconds per step (world of one, the worker's pipeline), per variant. */
  msPerStep: Record<StepVariant, number>;
}
