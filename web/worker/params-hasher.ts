/**
 * Where the training worker hashes the parameters each step (the value is the same either way:
 * coordinator/core/hash.ts `treeHash`):
 * - on the GPU (`paramsHasher`: kernels/sha256.wgsl over the params buffer, only the chunk digests read
 *   back, the root in JS) where the adapter is a real GPU;
 * - on the CPU after a read-back of the parameters (`hashParams`, pure JS) where the adapter is a
 *   software rasterizer that runs on the CPU itself (SwiftShader, llvmpipe/lavapipe, WARP): there the
 *   "GPU" shares the cores with the worker and runs the SHA-256 kernel several times slower than V8's
 *   JS (`npm run bench:hash`, bench/RESULTS.md: on SwiftShader a `mlp` step took +46–53 ms with the GPU
 *   hash against +15–27 ms with the read-back and the JS hash), so moving the hash there would slow steps down.
 */
import { hashParams, paramsHasher } from '../../coordinator/core/hash';
import type { ParamsHasher } from '../../kernels/training-state';
import type { AdapterSummary } from './types';

/** Names of CPU-backed WebGPU implementations as adapters report them (vendor, architecture, description). */
const SOFTWARE_ADAPTER = /swiftshader|llvmpipe|lavapipe|softpipe|software|microsoft basic render|\bwarp\b/i;

/** Whether the adapter runs on the CPU (a fallback adapter, or a known software implementation). */
export function cpuBackedAdapter(a: Pick<AdapterSummary, 'vendor' | 'architecture' | 'description' | 'isFallback'>) {
  return a.isFallback || SOFTWARE_ADAPTER.test(`${a.vendor} ${a.architecture} ${a.description}`);
}

/** The hash of the reference: read back, hashed in JS (no GPU form). */
export const readBackParamsHasher: ParamsHasher = { ofParams: (params) => hashParams(params) };

/** The hasher for this adapter: the GPU tree hash on a real GPU, the read-back and JS hash on a CPU-backed one. */
export function paramsHasherFor(
  a: Pick<AdapterSummary, 'vendor' | 'architecture' | 'description' | 'isFallback'>,
): ParamsHasher {
  return cpuBackedAdapter(a) ? readBackParamsHasher : paramsHasher;
}
