/**
 * The SHA-256 digests of a model's params buffer in `chunkBytes` chunks, computed on the GPU
 * (kernels/ops/sha256.wgsl, 32 bytes per chunk, concatenated): the leaves of the tree state hash
 * (core/state/hash.ts), so that only the digests are read back (0.8 % of the bytes at 4 KiB chunks),
 * not the parameters. The digests buffer and its kernel are made on first use (again for another
 * chunk size) and kept for the model's life, so hashing a step allocates no GPU memory.
 */
import { chunkCount, chunkSha256, type ChunkSha256Dims } from '../ops/sha256';
import { createTensor, type Gpu, type Kernel, type KernelCall, type Tensor } from '../runtime';

export class ParamDigests {
  private made?: { chunkBytes: number; digests: Tensor; kernel: Kernel<ChunkSha256Dims> };

  constructor(
    private readonly gpu: Gpu,
    private readonly params: Tensor,
    /** Bytes of the params buffer hashed (its flat elements · 4). */
    private readonly byteLength: number,
    private readonly label: string,
  ) {}

  /** The digests tensor, how many of its bytes hold digests, and the dispatch that fills it. */
  forChunks(chunkBytes: number): { digests: Tensor; bytes: number; call: KernelCall } {
    const byteLength = this.byteLength;
    if (this.made?.chunkBytes !== chunkBytes) {
      this.made?.digests.buffer.destroy();
      const dims = { byteLength, chunkBytes };
      const digests = createTensor(this.gpu, [Math.max(1, chunkCount(dims) * 8)], this.label);
      this.made = { chunkBytes, digests, kernel: chunkSha256(this.gpu, { data: this.params, digests }, dims) };
    }
    const { digests, kernel } = this.made;
    return { digests, bytes: chunkCount({ byteLength, chunkBytes }) * 32, call: kernel.call };
  }

  /** Free the digests buffer (a later `forChunks` makes a new one). */
  destroy(): void {
    this.made?.digests.buffer.destroy();
    this.made = undefined;
  }
}
