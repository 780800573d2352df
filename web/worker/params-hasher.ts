/**
 * Where the training worker hashes the parameters each step (the value is the same either way:
 * core/state/hash.ts `treeHash`):
 * - on the GPU (`paramsHasher`: kernels/ops/sha256.wgsl over the params buffer, only the chunk digests read
 *   back, the root in JS) where the adapter is a real GPU;
 * - on the CPU after a read-back of the parameters (`hashParams`, pure JS) where the adapter is a
 *   software rasterizer that runs on the CPU itself (SwiftShader, llvmpipe/lavapipe, WARP): there the
 *   "GPU" shares the cores with the worker and runs the SHA-256 kernel several times slower than V8's
 *   JS (`npm run bench:hash`, bench/RESULTS.md: on SwiftShader a `mlp` step took +46–53 ms with the GPU
 *   hash against +15–27 ms with the read-back and the JS hash), so moving the hash there would slow steps down.
 *   There the chunks are hashed by SHA-256 in WebAssembly (`wasmSha256`, the `hash-wasm` package) where
 *   the browser allows it, else by the pure-JS `@noble/hashes`: the same digests, and the wasm one is
 *   about 2–3× faster per chunk (bench:hash), which is most of what an elastic step costs over a solo one
 *   on a CPU-backed adapter (docs/performance.md, "The hash on a software adapter").
 */
import { createSHA256 } from 'hash-wasm';
import { hashParams, nobleSha256, paramsHasher, type Sha256Factory, trainingStateHash } from '../../core/state/hash';
import type { ParamsHasher } from '../../kernels/model/training-state';
import type { AdapterSummary } from './types';

/** Names of CPU-backed WebGPU implementations as adapters report them (vendor, architecture, description). */
const SOFTWARE_ADAPTER = /swiftshader|llvmpipe|lavapipe|softpipe|software|microsoft basic render|\bwarp\b/i;

/** Whether the adapter runs on the CPU (a fallback adapter, or a known software implementation). */
export function cpuBackedAdapter(a: Pick<AdapterSummary, 'vendor' | 'architecture' | 'description' | 'isFallback'>) {
  return a.isFallback || SOFTWARE_ADAPTER.test(`${a.vendor} ${a.architecture} ${a.description}`);
}

/** The hash of the reference: read back, hashed in JS (no GPU form). */
export const readBackParamsHasher: ParamsHasher = {
  ofParams: (params) => hashParams(params),
  ofState: (params, moments, t) => trainingStateHash(params, moments, t),
};

/** Read back, hashed on the CPU by `sha256`'s hashers (no GPU form). */
export function readBackParamsHasherWith(sha256: Sha256Factory): ParamsHasher {
  return sha256 === nobleSha256
    ? readBackParamsHasher
    : {
        ofParams: (params) => hashParams(params, sha256),
        ofState: (params, moments, t) => trainingStateHash(params, moments, t, sha256),
      };
}

/**
 * The hasher for this adapter: the GPU tree hash on a real GPU, the read-back and the CPU hash (by
 * `cpuSha256`'s hashers, default the pure-JS one) on a CPU-backed one.
 */
export function paramsHasherFor(
  a: Pick<AdapterSummary, 'vendor' | 'architecture' | 'description' | 'isFallback'>,
  cpuSha256: Sha256Factory = nobleSha256,
): ParamsHasher {
  return cpuBackedAdapter(a) ? readBackParamsHasherWith(cpuSha256) : paramsHasher;
}

/**
 * SHA-256 in WebAssembly (`hash-wasm`), as a `Sha256Factory`. It instantiates one hasher, so its hashers
 * are one object reset by each call of the factory: a hasher must be finished (its digest taken) before
 * the next is made, as `chunkDigests` and `treeRoot` do. Using an earlier one after that throws rather
 * than mixing two inputs. Null where WebAssembly is unavailable (a browser or policy that forbids it):
 * the caller keeps the pure-JS hash.
 */
export async function wasmSha256(): Promise<Sha256Factory | null> {
  let wasm: Awaited<ReturnType<typeof createSHA256>>;
  try {
    wasm = await createSHA256();
  } catch {
    return null;
  }
  let current = 0;
  return () => {
    const id = ++current;
    wasm.init();
    const live = () => {
      if (id !== current) throw new Error('wasmSha256: this hasher was used after a newer one was made');
    };
    return {
      update(data: Uint8Array) {
        live();
        wasm.update(data);
        return this;
      },
      digest() {
        live();
        return wasm.digest('binary');
      },
    };
  };
}

/**
 * The worker's hasher for its adapter, chosen once with the device: on a CPU-backed adapter the read-back
 * hashed by SHA-256 in WebAssembly (the pure-JS one where WebAssembly is refused), on a real GPU the GPU
 * tree hash (no WebAssembly instantiated: it would not be used).
 */
export async function chooseParamsHasher(
  a: Pick<AdapterSummary, 'vendor' | 'architecture' | 'description' | 'isFallback'>,
): Promise<ParamsHasher> {
  return paramsHasherFor(a, cpuBackedAdapter(a) ? ((await wasmSha256()) ?? undefined) : undefined);
}
