/**
 * SHA-256 of fixed-size chunks of a flat buffer on the GPU, one invocation per chunk: the leaves of the
 * tree state hash (core/state/hash.ts `treeHash`, whose `chunkDigests` is the CPU reference).
 * Recorded after the optimizer, it lets a worker read back 32 bytes per chunk instead of the parameters.
 * The chunk size is the caller's (kernels/ does not import the core): pass `HASH_CHUNK_BYTES`.
 */
import code from './sha256.wgsl?raw';
import { ceilDiv, computePipeline, dispatch1d, preparedKernel, type Gpu, type Kernel, type Tensor } from '../runtime';

/**
 * Chunks per workgroup. A chunk is a long serial loop (65 compressions at 4 KiB) and a model has only
 * hundreds of chunks (mlp 225, gpt-tiny 800), so small groups spread them over more compute units:
 * 32 (a warp) gives mlp 8 workgroups where 64 would give 4.
 */
const WORKGROUP_SIZE = 32;

export interface ChunkSha256Dims {
  /** Bytes to hash from the start of `data`: a multiple of 4, at most the tensor's bytes. */
  byteLength: number;
  /** Bytes per chunk: a positive multiple of 64. */
  chunkBytes: number;
}

/** Number of chunks (digests) of `byteLength` bytes. */
export function chunkCount(d: ChunkSha256Dims): number {
  return Math.ceil(d.byteLength / d.chunkBytes);
}

/**
 * digests[8c..8c+8) = SHA-256 of chunk c of `data` (as bytes in memory: the buffer's bytes are the
 * concatenated 32-byte digests). `digests` is a u32 tensor of at least 8 words per chunk.
 */
export function chunkSha256(
  gpu: Gpu,
  t: { data: Tensor; digests: Tensor },
  dims: ChunkSha256Dims,
): Kernel<ChunkSha256Dims> {
  const label = 'sha256.chunk-sha256';
  return preparedKernel(
    gpu,
    {
      label,
      pipeline: computePipeline(gpu, code, 'sha256', 'chunk_sha256', { WORKGROUP_SIZE }),
      uniformCount: 3,
      bind: (uniforms) => [uniforms, t.data, t.digests],
      plan: (d: ChunkSha256Dims) => {
        const { byteLength, chunkBytes } = d;
        if (!Number.isInteger(chunkBytes) || chunkBytes < 64 || chunkBytes % 64 !== 0 || chunkBytes > 2 ** 28)
          throw new Error(`${label}: chunkBytes ${chunkBytes} is not a positive multiple of 64 (at most 2^28)`);
        if (!Number.isInteger(byteLength) || byteLength < 0 || byteLength % 4 !== 0)
          throw new Error(`${label}: byteLength ${byteLength} is not a non-negative multiple of 4`);
        if (byteLength > t.data.size * 4)
          throw new Error(`${label}: byteLength ${byteLength} exceeds ${t.data.label} (${t.data.size * 4} bytes)`);
        const chunks = chunkCount(d);
        if (chunks * 8 > t.digests.size)
          throw new Error(
            `${label}: ${chunks} digests need ${chunks * 8} words, ${t.digests.label} has ${t.digests.size}`,
          );
        return { uniforms: [byteLength, chunkBytes, chunks], workgroups: dispatch1d(ceilDiv(chunks, WORKGROUP_SIZE)) };
      },
    },
    dims,
  );
}
